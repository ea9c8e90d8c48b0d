"""A moto model instance is kept only where moto reads it back.

moto: every instance of a model class (`BaseModel`: a DynamoDB item, an SQS message, a state
machine...) is appended to its class's `instances_tracked` when it is made, and those lists are
emptied only when the mock stops. Nothing reads them but moto's dashboard (`/moto-api/`, which
the local runtime does not serve) and S3's reset, which closes the buffers of the keys and
multipart uploads it finds there.

Why it matters: a DynamoDB update makes a new item and drops the old one, and an SQS message
is made for each send, so a long-lived runtime (`toolpipe serve`, a `LocalPipeline` kept for a
session) held every version of every item it ever wrote and every message it ever deleted,
until it stopped: 262 items and 20 messages a 10-turn run, a third of the memory it kept per
run (803 against 533 KiB over 100 runs, `benchmarks/pipeline.py`'s figure).

The patch: instances of S3's `FakeKey` and `FakeMultipart` (and their subclasses) are tracked
as before, for S3's reset; an instance of any other model is made as moto makes it, untracked.
It is process-wide, like every patch of moto's classes here.
"""

from typing import Any

from moto.core.common_models import BaseModel
from moto.s3.models import FakeKey, FakeMultipart

CHECKED_WITH = ("5.2.5",)

# The classes whose tracked instances moto reads (S3Backend.reset disposes of them).
READ_BACK = (FakeKey, FakeMultipart)


def _new(cls: type[BaseModel], *args: Any, **kwargs: Any) -> BaseModel:
    instance: BaseModel = super(BaseModel, cls).__new__(cls)  # as BaseModel.__new__ makes it
    if issubclass(cls, READ_BACK):
        cls.instances_tracked.append(instance)  # type: ignore[union-attr]  # set by moto's metaclass
    return instance


def install() -> None:
    BaseModel.__new__ = staticmethod(_new)  # type: ignore[method-assign]
