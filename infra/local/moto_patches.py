"""Per-request costs of moto and botocore, a leak and races of moto's Step Functions interpreter,
patched once per process.

- An inline Map started `MaxConcurrency` worker threads whatever its number of items (ten for a
  turn of one call; each thread's start waits for it to run): it starts one per item, up to
  `MaxConcurrency`, and the workers with no item to take did nothing.
- Every thread the interpreter started was appended to a module-level list nothing reads or
  empties (`TMP_THREADS`): each kept its worker, and through it the execution's state, for as
  long as the process lived (~140 threads a ten-turn run). The list keeps nothing now.
- A new boto3 client per Task state (~2.2 ms each: botocore's service model decoded again):
  clients are kept per region and service, as boto3 clients are thread-safe.
- A new JSONPath parser per expression (~0.3 ms each: ply's lexer and parser built again):
  parsed expressions are kept per text; jsonpath_ng's expressions do not change when used.
- The whole state machine definition parsed again (ANTLR, in Python) for every execution: ~35 ms,
  a tenth of a ten-turn run. Programs are kept per definition text: their components hold the
  definition only, and an execution's state lives in its environment. The one thing a component
  set on first use, the key of its slot in an environment's heap (retry counters), was a random
  id drawn then, a race once executions share the component: it is the component's identity.
- A `waitForTaskToken` task sets up its heartbeat clock only after its message is sent. A
  worker answering within that window (local workers are woken by the send, so they can) saw
  its first heartbeat refused as an invalid token, and a success arriving then waited out the
  whole heartbeat timeout. On AWS the token is valid from the send: a heartbeat before the
  clock starts is accepted, and an outcome already in ends the wait at once.
- An execution's interpreter state is built on its own thread after `StartExecution` answers:
  a `StopExecution` in between (a run cancelled right after it started) raised on the missing
  state and answered 500, or, a moment later, was ignored and the execution ran on. The stop is
  kept and applied when the program starts, so the execution ends aborted before its first
  state, as on AWS.
- `SendTaskSuccess`/`Failure`/`Heartbeat` look for the token in every running execution,
  reading each one's interpreter state: one that had just started (no state yet) made any of
  them raise (a worker's answer, a person's approval) and answer 500. Such an execution holds
  no token yet: it is passed over.
- An update expression's tree was deep-copied for each request, to be validated on the copy
  (the parsed tree is kept per text): `deepcopy`'s generic walk was half of an UpdateItem's time.
  The tree's nodes are copied as what they are: a class, a child list, a parent.
- A DynamoDB transaction deep-copied every table it touched, to roll back on failure: every
  item of every run, for each tool call's one-item transaction, so a long-lived dev server got
  slower with all it ever stored. The items the transaction names are copied instead (its
  operations touch distinct items, so restoring those is the whole rollback).
- Responses went through moto's shape-driven serializer, which looks up ~6 attribute aliases
  per member of every attribute value (a third of a GetItem's time): DynamoDB's item
  operations already build their answer as the wire's JSON, so it is dumped as it is.
- A query by partition key looked at every item of the table for the few of its partition: a
  run's step read its history in time that grew with every other run's. It looks at the
  partition alone now (tables keep items by partition key, so the set is the same), and only at
  the items its sort key condition admits.
- An update expression's clause counts were checked at every node of its clause chain, each
  check walking the rest of the chain: quadratic in the clauses (a 12-counter update took
  ~7 ms). The root's counts cover every node's, so they are checked there once.
- Update validation walks the expression tree once per validator (nine), and at each node rebuilt
  the validator's map of node types to handlers, twice, then matched the node against it with
  `isinstance` on abstract classes: the map is built once per validator (it holds the
  validator's own bound methods, so it cannot change under it), and which of its types a node's
  class matches is kept per validator class and node class.
- Each update expression was tokenised and parsed twice a request (to check it, then to run it):
  parsed once per text now; the tree is only read, and validation works on its own copy.
- The method list of a response class was rebuilt with `inspect.getmembers` on every request.
- Per request, moto turned the action's name into snake case with regular expressions, and drew
  a 52-character request id one random character at a time: names are converted once each, and
  ids come from two UUIDs (they only have to be unique; moto's seeded random is for tests that
  replay ids, which nothing here does).
- moto parses each JSON request against its shapes, and for every structure (each DynamoDB
  attribute value is one) looked every member's wire name up again and chose the parse method
  by building its name: members and methods are looked up once per shape now.
- botocore signs each request with SigV4 (a canonical request, then four HMACs: a sixth of a
  local request's time) that moto serves in-process and does not check. While moto is on, a
  client's request to an AWS host moto serves gets the same headers with the signature left out:
  moto still reads the access key and region from the `Authorization` credential. Everything
  else is signed as ever: presigned URLs, requests signed by hand (`toolpipe --api`), requests
  moto passes through (a tool's client for an S3-compatible store, say, or a passthrough moto
  is configured with), and every request while moto's IAM access control checks signatures.
- botocore cleans each part of its User-Agent header character by character on every request
  (a tenth of a local request's time): the same few parts, so each is cleaned once.
"""

import base64
import collections
import copy
import functools
import json
import math
import sys
import threading
import uuid
from typing import Any

import botocore.auth
import botocore.exceptions
import botocore.useragent
import botocore.utils
from jsonpath_ng.ext.parser import parse as jsonpath_ext_parse
from jsonpath_ng.parser import parse as jsonpath_parse
from moto import backend_index
from moto import settings as moto_settings
from moto.core import config as moto_config
from moto.core import responses as moto_responses
from moto.core.models import botocore_stubber
from moto.core.parse import BaseJSONParser
from moto.core.utils import get_equivalent_url_in_aws_domain
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.models.table import Table
from moto.dynamodb.parsing import validators as update_validators
from moto.dynamodb.parsing.ast_nodes import (  # type: ignore[attr-defined]  # untyped module
    DepthFirstTraverser,
    Node,
    UpdateExpression,
)
from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]  # untyped module
from moto.dynamodb.parsing.validators import ActionCountValidator
from moto.dynamodb.responses import DynamoResult
from moto.stepfunctions.parser import utils as stepfunctions_utils
from moto.stepfunctions.parser.api import (
    ExecutionStatus,
    InvalidToken,
    SendTaskFailureOutput,
    TaskDoesNotExist,
    TaskTimedOut,
)
from moto.stepfunctions.parser.asl.component.common.path import result_path
from moto.stepfunctions.parser.asl.component.eval_component import EvalComponent
from moto.stepfunctions.parser.asl.component.program.program import Program
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.inline_iteration_component import (
    InlineIterationComponent,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.max_concurrency import (
    DEFAULT_MAX_CONCURRENCY_VALUE,
)
from moto.stepfunctions.parser.asl.eval.callback.callback import (
    CallbackConsumerTimeout,
    CallbackEndpoint,
    CallbackNotifyConsumerError,
    CallbackOutcomeFailure,
    CallbackOutcomeSuccess,
    HeartbeatEndpoint,
)
from moto.stepfunctions.parser.asl.eval.environment import Environment
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
from moto.stepfunctions.parser.asl.utils import boto_client, json_path
from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker
from moto.stepfunctions.parser.models import StepFunctionsParserBackend
from moto.utilities import aws_headers

_lock = threading.Lock()
_installed = False
_original_client = boto_client.boto_client_for
_clients: dict[tuple[str, str, bool], Any] = {}
_clients_lock = threading.Lock()


def cached_client(region: str, service: str, state_credentials: Any = None) -> Any:
    """moto's `boto_client_for`, one client per region, service and endpoint."""
    key = (region, service, bool(botocore_stubber.enabled))
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = _original_client(region, service, state_credentials)
        return client


cached_parse = functools.lru_cache(maxsize=1024)(jsonpath_ext_parse)
cached_result_path_parse = functools.lru_cache(maxsize=1024)(jsonpath_parse)


# Kept per definition text (a runtime has one state machine; tests create a few dozen).
cached_program_parse = functools.lru_cache(maxsize=64)(AmazonStateLanguageParser.parse)


def _heap_key(self: EvalComponent) -> str:
    # Unique while the component lives, the same from every thread (moto drew it lazily).
    return f"{type(self).__name__}-{id(self)}"


def _copy_update_tree(value: Any, memo: Any = None) -> Any:
    """`deepcopy` as moto's update validator calls it, for the expression trees it copies."""
    if not _is_node(value):
        return copy.deepcopy(value, memo)  # the values `list_append` copies
    return _copy_node(value, None)


_SCALARS = (str, int, float, bool, type(None))
_node_classes: dict[type, bool] = {}


def _is_node(value: Any) -> bool:
    # `Node` is abstract: `isinstance` goes through ABCMeta's check, slow at this many calls.
    kind = type(value)
    known = _node_classes.get(kind)
    if known is None:
        known = _node_classes[kind] = isinstance(value, Node)
    return known


def _copy_node(node: Any, parent: Any) -> Any:
    copied = object.__new__(type(node))  # nodes are plain objects: their class and fields
    copied.__dict__.update(node.__dict__)
    copied.parent = parent
    if node.children is not None:
        copied.children = [
            _copy_node(child, copied)
            if _is_node(child)
            else child
            if isinstance(child, _SCALARS)
            else copy.deepcopy(child)
            for child in node.children
        ]
    return copied


_add_auth = botocore.auth.SigV4Auth.add_auth


_hosts_moto_serves: dict[str, bool] = {}


def _served_in_process(url: str) -> bool:
    """Whether moto answers this request itself, without checking its signature: a URL one of
    its backends serves (as its stubber decides), not one it is told to pass through, with its
    IAM access control off (on, it checks signatures)."""
    if math.inf > moto_settings.INITIAL_NO_AUTH_ACTION_COUNT:
        return False
    parsed, _ = get_equivalent_url_in_aws_domain(url)  # as the stubber reads it
    clean_url = f"{parsed.scheme}://{parsed.netloc}{parsed.path}"
    passthrough = moto_config.default_user_config.get("core", {}).get("passthrough", {})
    if passthrough.get("services") or moto_config.passthrough_url(clean_url):
        return False
    host = f"{parsed.scheme}://{parsed.netloc}"
    served = _hosts_moto_serves.get(host)
    if served is None:
        # Backends are found by host (the patterns end there): the first URL decides for its host.
        # Not one of them (another endpoint, or an AWS service moto lacks): sent over HTTP.
        served = _hosts_moto_serves[host] = any(
            pattern.match(clean_url) for _, pattern in backend_index.backend_url_patterns
        )
    return served


def _add_auth_unless_served_in_process(self: botocore.auth.SigV4Auth, request: Any) -> None:
    if (
        not botocore_stubber.enabled
        or isinstance(self, botocore.auth.SigV4QueryAuth)  # a presigned URL leaves the process
        or "client_region" not in request.context  # not a client's request: signed by hand, to send
        or not _served_in_process(request.url)
    ):
        return _add_auth(self, request)
    if self.credentials is None:
        raise botocore.exceptions.NoCredentialsError()
    now = botocore.utils.get_current_datetime()  # type: ignore[attr-defined]  # the signer's clock (not in the stubs)
    request.context["timestamp"] = now.strftime(botocore.auth.SIGV4_TIMESTAMP)
    # The date, token and payload hash headers, as the signer sets them (not in botocore's stubs).
    self._modify_request_before_signing(request)  # type: ignore[attr-defined]
    request.headers["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={self.scope(request)}, SignedHeaders=host, Signature=in-process"
    )
    return None


def _members(shape: Any) -> tuple[tuple[str, str, Any], ...]:
    """A structure's members with their wire names, kept on the shape (shapes do not change)."""
    members: tuple[tuple[str, str, Any], ...] | None = shape.__dict__.get("_toolpipe_members")
    if members is None:
        members = tuple(
            (name, member.serialization.get("name", name), member) for name, member in shape.members.items()
        )
        shape.__dict__["_toolpipe_members"] = members
    return members


_moto_parse_structure = BaseJSONParser._parse_structure
_moto_parse_shape = BaseJSONParser._parse_shape


def _parse_json_structure(self: BaseJSONParser, shape: Any, value: Any) -> Any:
    if shape.is_document_type:
        return value
    if value is None:
        return None  # as moto's: a JSON null stays None, not an empty structure
    parsed = self.MAP_TYPE()
    for name, wire_name, member in _members(shape):
        raw = value.get(wire_name)
        if raw is not None:
            parsed[name] = self._parse_shape(member, raw)  # type: ignore[no-untyped-call]
    return parsed


def _parse_json_shape(self: BaseJSONParser, shape: Any, node: Any) -> Any:
    parsers: dict[str, Any] | None = type(self).__dict__.get("_toolpipe_parsers")
    if parsers is None:
        parsers = {}
        type(self)._toolpipe_parsers = parsers  # type: ignore[attr-defined]  # one table per parser class
    parse = parsers.get(shape.type_name)
    if parse is None:
        parse = parsers[shape.type_name] = getattr(
            type(self), f"_parse_{shape.type_name}", type(self)._default_handle
        )
    return parse(self, shape, node)


_inline_map_body = InlineIterationComponent._eval_body


def _inline_map_body_one_worker_per_item(self: InlineIterationComponent, env: Environment) -> None:
    # What moto's body pops: the items and the concurrency. Changing it is safe: the Map state
    # builds a new one for each attempt, and nothing but the worker count reads the concurrency.
    eval_input = env.stack[-1]
    items = len(eval_input.input_items)
    if items < eval_input.max_concurrency:
        # "No limit" is what moto reads as one worker per item.
        eval_input.max_concurrency = DEFAULT_MAX_CONCURRENCY_VALUE
    _inline_map_body(self, env)


def _stop_keeping_threads() -> None:
    kept = stepfunctions_utils.TMP_THREADS
    not_kept: collections.deque[Any] = collections.deque(maxlen=0)  # appended to, keeps nothing
    # Modules imported the list by name: rebind it wherever it was taken, and at its source
    # for modules imported later.
    for module in list(sys.modules.values()):
        if getattr(module, "TMP_THREADS", None) is kept:
            module.TMP_THREADS = not_kept  # type: ignore[attr-defined]
    kept.clear()


def _setup_heartbeat_endpoint(self: CallbackEndpoint, heartbeat_seconds: int) -> HeartbeatEndpoint:
    endpoint = HeartbeatEndpoint(heartbeat_seconds=heartbeat_seconds)
    self._heartbeat_endpoint = endpoint
    # `notify` stores the outcome before it reads the endpoint: whichever runs second sees
    # the other's write, so an outcome that came in first still ends the wait.
    if self.get_outcome() is not None:
        endpoint.notify()  # type: ignore[no-untyped-call]  # moto leaves `notify` unannotated
    return endpoint


def _notify_heartbeat(self: CallbackEndpoint) -> bool:
    endpoint = self._heartbeat_endpoint
    if endpoint is None:
        return True  # the task is live; its heartbeat clock has not started yet
    endpoint.notify()  # type: ignore[no-untyped-call]  # moto leaves `notify` unannotated
    return True


_stops_lock = threading.Lock()
_new_environment = ExecutionWorker._get_evaluation_environment
_program_body = Program._eval_body


def _environment_knowing_its_worker(self: ExecutionWorker) -> Environment:
    environment = _new_environment(self)
    environment.__dict__["_toolpipe_worker"] = self  # frames are new objects: the root alone has it
    return environment


def _program_body_applying_a_stop(self: Program, env: Environment) -> None:
    worker = env.__dict__.get("_toolpipe_worker")
    if worker is not None:
        with _stops_lock:
            worker.__dict__["_toolpipe_running"] = True
            pending = worker.__dict__.pop("_toolpipe_stop", None)
        if pending is not None:
            env.set_stop(**pending)
    _program_body(self, env)


def _stop_when_running(self: ExecutionWorker, stop_date: Any, error: str | None, cause: str | None) -> None:
    # Before the program runs, moto's `set_stop` raised (no state yet) or was ignored (no
    # running state yet): the stop waits for the program's first step instead.
    with _stops_lock:
        if not self.__dict__.get("_toolpipe_running"):
            self.__dict__["_toolpipe_stop"] = {"stop_date": stop_date, "cause": cause, "error": error}
            return
    assert self.env is not None  # set before the program runs
    self.env.set_stop(stop_date=stop_date, cause=cause, error=error)


def _callbacks(execution: Any) -> Any:
    """The execution's callback pool, or None while its interpreter state is not built yet."""
    worker = execution.exec_worker
    environment = getattr(worker, "env", None) if worker is not None else None
    return None if environment is None else environment.callback_pool_manager


def _answer_task(executions: Any, answer: Any) -> bool:
    """moto's loop over executions for a task token, passing over those without state yet."""
    for execution in executions:
        pool = _callbacks(execution)
        if pool is None:
            continue
        try:
            if answer(pool):
                return True
        except CallbackNotifyConsumerError as error:
            # As moto raises them: their message is optional at run time, not in their stubs.
            if isinstance(error, CallbackConsumerTimeout):
                raise TaskTimedOut() from None  # type: ignore[call-arg]
            raise TaskDoesNotExist() from None  # type: ignore[call-arg]
    raise InvalidToken()  # type: ignore[no-untyped-call]


def _send_task_heartbeat(self: StepFunctionsParserBackend, task_token: str) -> None:
    running = self._get_executions(ExecutionStatus.RUNNING)
    _answer_task(running, lambda pool: pool.heartbeat(callback_id=task_token))


def _send_task_success(self: StepFunctionsParserBackend, task_token: str, outcome: str) -> None:
    success = CallbackOutcomeSuccess(callback_id=task_token, output=outcome)
    running = self._get_executions(ExecutionStatus.RUNNING)
    _answer_task(running, lambda pool: pool.notify(callback_id=task_token, outcome=success))


def _send_task_failure(
    self: StepFunctionsParserBackend, task_token: str, error: Any = None, cause: Any = None
) -> SendTaskFailureOutput:
    failure = CallbackOutcomeFailure(callback_id=task_token, error=error, cause=cause)
    # Every execution, not only running ones: as moto's own (a failure may close any task).
    _answer_task(self._get_executions(), lambda pool: pool.notify(callback_id=task_token, outcome=failure))
    return SendTaskFailureOutput()


class _TablesNotCopied:
    """The `copy` module as moto's DynamoDB backend sees it: tables come back as they are (the
    transaction's rollback is done per item, below); anything else is copied as before."""

    copy = staticmethod(copy.copy)

    @staticmethod
    def deepcopy(value: Any, memo: Any = None) -> Any:
        return value if isinstance(value, Table) else copy.deepcopy(value, memo)


Saved = tuple[Table, DynamoType, DynamoType | None, Item | None]
_transact_write_items = DynamoDBBackend.transact_write_items


def _items_named(backend: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> list[Saved]:
    saved: list[Saved] = []
    for entry in transact_items[:100]:  # more is refused before anything is written
        try:
            ((op_type, op),) = entry.items()
            table = backend.tables[op["TableName"]]
            attributes = op["Item"] if op_type == "Put" else op["Key"]
            hash_key = DynamoType(attributes[table.hash_key_attr])
            range_key = DynamoType(attributes[table.range_key_attr]) if table.range_key_attr else None
            current = table.get_item(hash_key, range_key)
        except Exception:
            continue  # a malformed operation: the transaction refuses it and writes nothing of it
        saved.append((table, hash_key, range_key, copy.deepcopy(current)))
    return saved


def _transact_write_items_copying_items(self: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
    saved = _items_named(self, transact_items)
    try:
        _transact_write_items(self, transact_items)
    except BaseException:
        for table, hash_key, range_key, item in reversed(saved):
            if item is None:
                table.delete_item(hash_key, range_key)
            elif range_key is not None:
                table.items[hash_key][range_key] = item
            else:
                table.items[hash_key] = item  # type: ignore[assignment]
        raise


# Item operations whose result moto builds as the wire's JSON already (`dynamo_to_dict`).
_AS_BUILT = {
    "GetItem",
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "Query",
    "Scan",
    "BatchGetItem",
    "BatchWriteItem",
    "TransactGetItems",
    "TransactWriteItems",
}
_serialize_result = DynamoResult.execute_result


def _as_wire(value: Any) -> Any:
    # As the serializer: members that are None are left out, and blobs are base64 text.
    if isinstance(value, dict):
        return {k: _as_wire(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_as_wire(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def _execute_result_as_built(self: DynamoResult, context: Any) -> Any:
    if context.operation_model.name not in _AS_BUILT or not isinstance(self.result, dict):
        return _serialize_result(self, context)
    # Only what the operation's answer has (moto adds the odd extra, e.g. to DeleteItem's).
    members = context.operation_model.output_shape.members
    answer = {k: v for k, v in self.result.items() if k in members}
    return 200, {"Content-Type": "application/x-amz-json-1.0"}, json.dumps(_as_wire(answer))


_query = Table.query
_all_items = Table.all_items
_partition = threading.local()  # the partition (and sort key condition) a base-table query reads


def _query_one_partition(self: Table, hash_key: DynamoType | None, *args: Any, **kwargs: Any) -> Any:
    index_name = kwargs.get("index_name", args[6] if len(args) > 6 else None)
    if index_name or hash_key is None:
        return _query(self, hash_key, *args, **kwargs)
    range_comparison = kwargs.get("range_comparison", args[0] if args else None)
    range_objs = kwargs.get("range_objs", args[1] if len(args) > 1 else [])
    _partition.key = hash_key
    _partition.condition = (
        (range_comparison, range_objs) if self.range_key_attr and range_comparison else None
    )
    try:
        return _query(self, hash_key, *args, **kwargs)
    finally:
        _partition.key = _partition.condition = None


def _items_of_partition(self: Table) -> list[Item]:
    hash_key = getattr(_partition, "key", None)
    if hash_key is None:
        return _all_items(self)
    found = self.items.get(hash_key)  # get, not []: the dict is a defaultdict
    if found is None:
        return []
    if not self.range_key_attr:
        return [found]  # type: ignore[list-item]
    condition = _partition.condition
    if condition is None:
        return list(found.values())
    # The sort key condition picks the same items before moto sorts them as after: a query for
    # the newest items of a long history sorts those few, not the whole partition.
    comparison, values = condition
    return [item for item in found.values() if item.range_key.compare(comparison, values)]


_count_at_every_node = ActionCountValidator.traverse


def _count_at_the_root(self: ActionCountValidator, node: Any) -> Any:
    # The root's clauses include every sub-expression's: too many anywhere is too many here.
    if isinstance(node, UpdateExpression):
        return self.verify_action_counts(node)
    return _count_at_every_node(self, node)


# Per validator class, which of its handled types (tried in order) each node class is: ABC
# `isinstance` checks, nine validators, every node of every update, were a fifth of an UpdateItem.
_handled_as: dict[tuple[type, type], type | None] = {}
_moto_traverse_node = DepthFirstTraverser.traverse_node_recursively


def _traverse_node_recursively(self: DepthFirstTraverser, node: Any, child_id: int = -1) -> Any:
    """moto's depth-first walk, each node's handler found by its class once per validator class.
    It calls no `nodes_to_be_processed`/`process` of the validator's: no validator overrides them
    (a test checks, for the moto this runs with)."""
    if not _is_node(node):
        return node
    parent = node.parent
    if node.children is not None:
        for i, child in enumerate(node.children):
            self.pre_processing_of_child(node, i)
            self.traverse_node_recursively(child, i)
    handlers: dict[type, Any] | None = self.__dict__.get("_toolpipe_handlers")
    if handlers is None:  # the validator's own bound methods: built once per validator
        handlers = self.__dict__["_toolpipe_handlers"] = self._processing_map()
    key = (type(self), type(node))
    if key not in _handled_as:
        _handled_as[key] = next((t for t in handlers if isinstance(node, t)), None)
    handled_as = _handled_as[key]
    if handled_as is None:
        return node
    node = handlers[handled_as](node)
    node.parent = parent
    if parent:
        parent.children[child_id] = node
    return node


def _request_id(headerdict: dict[str, Any] | None = None) -> str:
    request_id = (uuid.uuid4().hex + uuid.uuid4().hex)[:52].upper()
    if isinstance(headerdict, dict):
        headerdict["x-amzn-requestid"] = request_id
    return request_id


def install() -> None:
    """Apply the patches, once per process."""
    global _installed
    with _lock:
        if _installed:
            return
        # Modules imported `boto_client_for` by name: rebind it wherever it was taken.
        import moto.stepfunctions.parser.asl.parse.preprocessor

        for module in list(sys.modules.values()):
            if getattr(module, "boto_client_for", None) is _original_client:
                module.boto_client_for = cached_client  # type: ignore[attr-defined]
        # Rebinds the name each module looks `parse` up by (imported there, not exported).
        json_path.parse = cached_parse  # type: ignore[attr-defined]
        result_path.parse = cached_result_path_parse  # type: ignore[attr-defined]
        CallbackEndpoint.setup_heartbeat_endpoint = _setup_heartbeat_endpoint  # type: ignore[method-assign]
        CallbackEndpoint.notify_heartbeat = _notify_heartbeat  # type: ignore[method-assign]
        ExecutionWorker._get_evaluation_environment = _environment_knowing_its_worker  # type: ignore[method-assign]
        ExecutionWorker.stop = _stop_when_running  # type: ignore[method-assign]
        Program._eval_body = _program_body_applying_a_stop  # type: ignore[method-assign]
        StepFunctionsParserBackend.send_task_heartbeat = _send_task_heartbeat  # type: ignore[method-assign, assignment]
        StepFunctionsParserBackend.send_task_success = _send_task_success  # type: ignore[method-assign, assignment]
        StepFunctionsParserBackend.send_task_failure = _send_task_failure  # type: ignore[method-assign]
        # Rebinds the `copy` module the backend looks up (imported there, not exported).
        moto.dynamodb.models.copy = _TablesNotCopied  # type: ignore[attr-defined, assignment]
        DynamoDBBackend.transact_write_items = _transact_write_items_copying_items  # type: ignore[method-assign]
        DynamoResult.execute_result = _execute_result_as_built  # type: ignore[method-assign, assignment]
        InlineIterationComponent._eval_body = _inline_map_body_one_worker_per_item  # type: ignore[method-assign]
        _stop_keeping_threads()
        AmazonStateLanguageParser.parse = staticmethod(cached_program_parse)  # type: ignore[method-assign]
        EvalComponent.heap_key = property(_heap_key)  # type: ignore[method-assign, assignment]
        # Rebinds the name the validators look `deepcopy` up by (imported there, not exported).
        update_validators.deepcopy = _copy_update_tree  # type: ignore[attr-defined, assignment]
        ActionCountValidator.traverse = _count_at_the_root
        DepthFirstTraverser.traverse_node_recursively = _traverse_node_recursively
        UpdateExpressionParser.make = classmethod(
            functools.lru_cache(maxsize=512)(UpdateExpressionParser.make.__func__)  # type: ignore[arg-type]
        )
        Table.query = _query_one_partition  # type: ignore[method-assign]
        Table.all_items = _items_of_partition  # type: ignore[method-assign]
        responses = moto_responses
        snake_case = responses.camelcase_to_underscores  # type: ignore[attr-defined]  # imported there, not exported
        responses.camelcase_to_underscores = functools.lru_cache(maxsize=4096)(snake_case)  # type: ignore[attr-defined]
        responses.gen_amzn_requestid_long = _request_id  # type: ignore[attr-defined]
        aws_headers.gen_amzn_requestid_long = _request_id
        # Response classes do not change once imported: their method lists need listing once.
        listed = responses.method_names_from_class  # type: ignore[attr-defined]  # imported there, not exported
        responses.method_names_from_class = functools.cache(listed)  # type: ignore[attr-defined]
        BaseJSONParser._parse_structure = _parse_json_structure  # type: ignore[method-assign]
        BaseJSONParser._parse_shape = _parse_json_shape  # type: ignore[method-assign, assignment]
        botocore.auth.SigV4Auth.add_auth = _add_auth_unless_served_in_process  # type: ignore[method-assign]
        botocore.useragent.sanitize_user_agent_string_component = functools.lru_cache(maxsize=4096)(
            botocore.useragent.sanitize_user_agent_string_component
        )
        _installed = True
