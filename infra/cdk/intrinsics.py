"""CloudFormation's intrinsic functions, resolved offline: the local runtime resolves a template
against the resources it created (`infra/local/deployment.py`), the deploy checks against
well-formed stand-ins (`infra/cdk/deploy_checks.py`)."""

from collections.abc import Callable, Mapping
from typing import Any


class IntrinsicError(ValueError):
    """A reference to nothing the resolver knows, or an intrinsic function it does not do."""


class Resolver:
    """CloudFormation's intrinsic functions, as far as toolpipe's templates use them: `refs`
    (logical id -> what `Ref` gives) and `attributes` ((logical id, attribute) -> what
    `Fn::GetAtt` gives) say what each resource resolves to (a local resource, a stand-in)."""

    def __init__(
        self,
        refs: Mapping[str, str],
        attributes: Mapping[tuple[str, str], str],
        *,
        region: str,
        account: str,
        stack_name: str = "toolpipe-local",
        partition: str = "aws",
        url_suffix: str = "amazonaws.com",
    ) -> None:
        self._refs = {
            "AWS::Partition": partition,
            "AWS::Region": region,
            "AWS::AccountId": account,
            "AWS::URLSuffix": url_suffix,
            "AWS::StackName": stack_name,
            **refs,
        }
        self._attributes = attributes
        self._functions: dict[str, Callable[[Any], Any]] = {
            "Ref": self._ref,
            "Fn::GetAtt": self._get_att,
            "Fn::Join": lambda args: str(self.resolve(args[0])).join(str(self.resolve(v)) for v in args[1]),
            "Fn::Select": lambda args: self.resolve(args[1])[int(self.resolve(args[0]))],
            "Fn::Split": lambda args: str(self.resolve(args[1])).split(str(self.resolve(args[0]))),
        }

    def resolve(self, value: Any) -> Any:
        if isinstance(value, dict):
            if len(value) == 1:
                ((name, args),) = value.items()
                if name in self._functions:
                    return self._functions[name](args)
                if name.startswith("Fn::"):
                    raise IntrinsicError(f"cannot resolve {name}")
            return {k: self.resolve(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        return value

    def _ref(self, name: str) -> str:
        try:
            return self._refs[name]
        except KeyError:
            raise IntrinsicError(f"no value for Ref {name}") from None

    def _get_att(self, args: list[str] | str) -> str:
        name, attribute = args.split(".", 1) if isinstance(args, str) else args
        try:
            return self._attributes[(name, attribute)]
        except KeyError:
            raise IntrinsicError(f"no value for Fn::GetAtt {name}.{attribute}") from None
