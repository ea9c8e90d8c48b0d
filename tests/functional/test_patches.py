"""The patches' own bookkeeping (the moto they were checked with, the runtime's refusal of
another) and the patches that only keep results (names, method lists, request ids, the
User-Agent, parsed updates): each test fails without its patch. The others are tested in
tests/functional/test_moto_patches.py and, for a stop, tests/e2e/test_execution_ended.py."""

import decimal
import functools
import importlib.metadata
import inspect
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import boto3
import botocore.compat
import botocore.config
import botocore.hooks
import botocore.loaders
import botocore.useragent
import pytest
from botocore.exceptions import UnknownServiceError
from moto import mock_aws
from moto.core import responses
from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]  # untyped module
from moto.dynamodb.parsing.validators import ActionCountValidator

from toolpipe.infra.local import patches, user_cache
from toolpipe.infra.local.patches import UntestedMotoError, correctness, speed
from toolpipe.infra.local.patches.speed import endpoint_rules, item_answers, service_listing, session_events
from toolpipe.infra.local.runtime import LocalRuntime
from toolpipe.shared.errors import ConfigurationError

patches.install()


def test_every_patch_was_checked_with_the_moto_the_runtime_accepts_and_this_is_it() -> None:
    for patch in (*correctness.PATCHES, *speed.PATCHES):
        assert set(patches.TESTED_MOTO) <= set(patch.CHECKED_WITH), patch.__name__
        assert patch.__doc__ and "The patch" in patch.__doc__, patch.__name__
    assert importlib.metadata.version("moto") in patches.TESTED_MOTO


def test_the_runtime_refuses_an_untested_moto_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "5.1.0")
    runtime = LocalRuntime(workers=0)
    with pytest.raises(UntestedMotoError) as refused:
        runtime.__enter__()
    assert isinstance(refused.value, ConfigurationError)  # the CLI prints it as its one line
    message = str(refused.value)
    assert "\n" not in message
    assert "moto 5.1.0 is installed" in message and "5.2.5" in message


def _table(client: Any, name: str, stream: str | None = None) -> None:
    """A table keyed by `pk` alone, with a stream of the view type `stream` if one is named."""
    streamed = {"StreamSpecification": {"StreamEnabled": True, "StreamViewType": stream}} if stream else {}
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        **streamed,
    )


def _table_and_requests() -> Any:
    client = boto3.client("dynamodb", region_name="us-east-1")
    _table(client, "t")
    for n in range(3):
        client.put_item(TableName="t", Item={"pk": {"S": "k"}, "n": {"N": str(n)}})
    return client


def test_an_action_name_is_converted_once() -> None:
    with mock_aws():
        _table_and_requests()
    assert responses.camelcase_to_underscores.cache_info().hits > 0  # type: ignore[attr-defined]


def test_a_queues_attribute_names_are_converted_once_and_every_moto_module_takes_the_kept_function() -> None:
    """Each SQS `ReceiveMessage` built the queue's 14 attributes three times for each message,
    converting each name again (~40 conversions): a third of the request."""
    import moto.sqs.models

    snake_case: Any = moto.core.utils.camelcase_to_underscores
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue = sqs.create_queue(QueueName="q")["QueueUrl"]
        for body in ("x", "y"):
            sqs.send_message(QueueUrl=queue, MessageBody=body)
        sqs.receive_message(QueueUrl=queue, AttributeNames=["All"])  # the names' first use
        before = snake_case.cache_info()
        assert len(sqs.receive_message(QueueUrl=queue, AttributeNames=["All"])["Messages"]) == 1
        after = snake_case.cache_info()
    assert after.hits - before.hits > 40 and after.misses == before.misses
    assert snake_case("MessageRetentionPeriod") == "message_retention_period"  # moto's own answer
    holders = [
        module.__name__
        for name, module in list(sys.modules.items())
        if name.startswith("moto.") and hasattr(module, "camelcase_to_underscores")
    ]
    assert "moto.sqs.models" in holders and "moto.core.responses" in holders
    assert all(sys.modules[name].camelcase_to_underscores is snake_case for name in holders)


def test_a_response_class_method_list_is_listed_once() -> None:
    with mock_aws():
        _table_and_requests()
    assert responses.method_names_from_class.cache_info().hits > 0  # type: ignore[attr-defined]


def test_request_ids_are_unique_and_drawn_from_uuids() -> None:
    with mock_aws():
        client = _table_and_requests()
        ids = [
            client.get_item(TableName="t", Key={"pk": {"S": "k"}})["ResponseMetadata"]["RequestId"]
            for _ in range(20)
        ]
    assert len(set(ids)) == len(ids)
    # moto's own draws from every letter: 20 ids of hex digits alone would be a 1 in 10^300 chance.
    assert all(re.fullmatch(r"[0-9A-F]{52}", request_id) for request_id in ids)


def test_each_user_agent_part_is_cleaned_once() -> None:
    with mock_aws():
        _table_and_requests()
    clean: Any = botocore.useragent.sanitize_user_agent_string_component
    assert clean.cache_info().hits > 0


def test_every_session_shares_one_loader_so_a_model_is_decoded_once() -> None:
    """moto resets boto3's default session at each start: without the patch each new session's
    loader decoded every service model again."""
    sessions = []
    for _ in range(2):
        with mock_aws():
            boto3.client("sqs", region_name="us-east-1").list_queues()
            sessions.append(boto3.DEFAULT_SESSION)
    first, second = (s._session.get_component("data_loader") for s in sessions if s is not None)  # type: ignore[union-attr]
    assert sessions[0] is not sessions[1] and first is second
    model = first.load_service_model("sqs", "service-2")
    assert second.load_service_model("sqs", "service-2") is model


class _Sent(Exception):
    """Raised in place of sending a request: its URL is the endpoint the client resolved."""


def _endpoint_of_a_request(client: Any) -> str:
    def stop(request: Any, **kwargs: Any) -> None:
        raise _Sent(request.url)

    client.meta.events.register_first("before-send", stop)
    with pytest.raises(_Sent) as sent:
        client.list_queues()
    return str(sent.value)


def test_clients_of_a_service_share_its_parsed_endpoint_rules_and_each_resolves_its_own_endpoint() -> None:
    """Each client parsed its service's endpoint rules again: ~12% of making one."""
    first, second = boto3.Session(), boto3.Session()
    clients = {
        "https://sqs.us-east-1.amazonaws.com/": first.client("sqs", region_name="us-east-1"),
        "https://sqs.eu-west-1.amazonaws.com/": second.client("sqs", region_name="eu-west-1"),
        "https://sqs-fips.us-east-1.amazonaws.com/": first.client(
            "sqs", region_name="us-east-1", config=botocore.config.Config(use_fips_endpoint=True)
        ),
        "http://127.0.0.1:9/": second.client(
            "sqs", region_name="us-east-1", endpoint_url="http://127.0.0.1:9"
        ),
    }
    providers = {id(client._ruleset_resolver._provider) for client in clients.values()}
    assert len(providers) == 1
    s3 = first.client("s3", region_name="us-east-1")
    assert id(s3._ruleset_resolver._provider) not in providers
    for endpoint, client in clients.items():  # in this order: the shared resolutions hold each
        assert _endpoint_of_a_request(client) == endpoint
    assert [_endpoint_of_a_request(client) for client in reversed(clients.values())] == list(
        reversed(clients)
    )


def test_sessions_with_loaders_of_their_own_keep_no_more_than_the_bound_of_endpoint_rules() -> None:
    """A session whose loader is its own (a tool may make one) brings new rulesets at each
    client: the kept providers stay bounded, and the shared loader's are still shared."""
    for _ in range(endpoint_rules.KEPT_PROVIDERS + 6):
        session = boto3.Session()
        session._session.register_component("data_loader", botocore.loaders.Loader())
        session.client("sqs", region_name="us-east-1")
        assert len(endpoint_rules._kept) <= endpoint_rules.KEPT_PROVIDERS
    first, second = (boto3.Session().client("sqs", region_name="eu-west-1") for _ in range(2))
    assert first._ruleset_resolver._provider is second._ruleset_resolver._provider
    assert _endpoint_of_a_request(second) == "https://sqs.eu-west-1.amazonaws.com/"


def test_a_new_session_adds_no_directory_twice_to_the_shared_loaders_search_path() -> None:
    """boto3 appends its data directory to each new session's loader: once shared, the path
    grew by one entry at every runtime's start."""
    sessions = [boto3.Session() for _ in range(3)]
    loader = sessions[0]._session.get_component("data_loader")
    assert sessions[2]._session.get_component("data_loader") is loader
    assert len(loader.search_paths) == len(set(loader.search_paths))


def test_a_handlers_signature_is_read_once_per_function_and_answers_as_botocores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each new session registered ~130 handlers, building each one's signature again: ~9 ms."""

    def takes_kwargs(a: int, **kwargs: Any) -> None: ...
    def takes_none(a: int) -> None: ...

    class Handlers:
        def takes_kwargs(self, **kwargs: Any) -> None: ...
        def takes_none(self) -> None: ...
        def __call__(self, **kwargs: Any) -> None: ...

    handlers = Handlers()
    callables: list[Any] = [
        takes_kwargs,
        takes_none,
        handlers.takes_kwargs,
        handlers.takes_none,
        handlers,
        functools.partial(takes_kwargs, 1),
        functools.partial(takes_none, 1),
        len,
    ]
    for func in callables:
        try:
            expected: Any = botocore.compat.accepts_kwargs(func)  # botocore's own
        except TypeError as e:
            expected = type(e)
        for _ in range(2):
            try:
                answer: Any = session_events.accepts_kwargs(func)
            except TypeError as e:
                answer = type(e)
            assert answer == expected, func

    read: list[Any] = []
    monkeypatch.setattr(session_events, "_original_accepts_kwargs", lambda f: read.append(f) or "kwargs")

    def fresh(**kwargs: Any) -> None: ...

    class Fresh:
        def method(self, **kwargs: Any) -> None: ...

    assert [session_events.accepts_kwargs(fresh) for _ in range(3)] == ["kwargs"] * 3
    assert [session_events.accepts_kwargs(Fresh().method) for _ in range(3)] == ["kwargs"] * 3
    assert read == [fresh, Fresh.method]  # once each; a method as its function
    monkeypatch.undo()

    # A function changed in place is read again, as botocore reads it: its code swapped (a
    # reloader's), or a signature of its own set.
    def handler(event: str) -> None: ...

    def fixed(event: str, **kwargs: Any) -> None: ...

    assert session_events.accepts_kwargs(handler) is None
    handler.__code__ = fixed.__code__
    assert session_events.accepts_kwargs(handler) == "kwargs"
    handler.__signature__ = inspect.signature(takes_none)  # type: ignore[attr-defined]
    assert session_events.accepts_kwargs(handler) is None
    assert botocore.compat.accepts_kwargs(handler) is None  # botocore's own
    # A session refuses a handler without **kwargs, as botocore does.
    with pytest.raises(ValueError, match="must accept keyword arguments"):
        boto3.Session()._session.register("before-call.s3", takes_none)
    assert botocore.hooks.accepts_kwargs is session_events.accepts_kwargs


def test_an_event_names_alias_is_found_once_for_every_session_and_client() -> None:
    """Every session and every client translated each event name again, from an empty cache."""
    names = [
        "before-call.stepfunctions.StartExecution",
        "before-call.events.PutEvents",
        "needs-retry.dynamodb.GetItem",
        "creating-client-class.runtime.sagemaker",
        "before-call.s3",
    ]
    unpatched: Any = botocore.hooks.EventAliaser.__new__(botocore.hooks.EventAliaser)
    session_events._original_aliaser_init(unpatched, botocore.hooks.HierarchicalEmitter())
    expected = [unpatched._alias_event_name(name) for name in names]  # botocore's own, its own cache
    assert expected[:2] == ["before-call.sfn.StartExecution", "before-call.eventbridge.PutEvents"]
    first, second = (boto3.Session()._session._events for _ in range(2))
    client_events = boto3.Session().client("s3", region_name="us-east-1").meta.events  # a copy of them
    assert first._alias_name_cache is second._alias_name_cache is client_events._alias_name_cache
    assert [first._alias_event_name(name) for name in names] == expected
    assert {name: first._alias_name_cache[name] for name in names} == dict(zip(names, expected, strict=True))
    assert [client_events._alias_event_name(name) for name in names] == expected
    # Other aliases, other answers: a cache of their own, as before.
    other = botocore.hooks.EventAliaser(botocore.hooks.HierarchicalEmitter(), {"s3": "simple-storage"})
    assert other._alias_name_cache is not first._alias_name_cache
    assert other._alias_event_name("before-call.s3") == "before-call.simple-storage"
    assert first._alias_event_name("before-call.s3") == "before-call.s3"


def test_a_new_loader_lists_the_services_without_walking_the_data_directories_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """moto makes a loader for each service model it reads: each listed every service under
    botocore's data directory again (~23 ms each, eight at a process's first runtime)."""
    listed = botocore.loaders.create_loader().list_available_services("service-2")
    assert listed == service_listing._original(botocore.loaders.Loader(), "service-2")  # botocore's own
    walked: list[str] = []
    listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda path: walked.append(str(path)) or listdir(path))
    loader = botocore.loaders.create_loader()  # as moto makes one
    assert loader.list_available_services("service-2") == listed
    assert walked == []
    assert loader.load_service_model("sqs", "service-2")["metadata"]["serviceId"] == "SQS"
    with pytest.raises(UnknownServiceError):
        loader.load_service_model("no-such-service", "service-2")


def test_motos_routes_compile_no_url_builder_until_one_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """werkzeug compiled two URL builders for each of a REST service's routes (Lambda: 89) when
    moto built its router, for code moto never calls: compiled now on a builder's first call,
    to the URL werkzeug's own builds, and requests are routed as before."""
    from moto.core.routing import SmithyRule
    from werkzeug.routing import Map, Rule

    def rules(kind: Any) -> list[Rule]:
        return [
            kind("/2015-03-31/functions/<FunctionName>/invocations", operations=[], methods=["POST"])
            if kind is SmithyRule
            else kind("/2015-03-31/functions/<FunctionName>/invocations", methods=["POST"])
        ]

    speed.route_builders.install()  # as a runtime's start does (process-wide, once)
    compiled: list[str] = []
    real_compile = compile
    monkeypatch.setattr(
        "builtins.compile", lambda *a, **k: compiled.append(str(a[1])) or real_compile(*a, **k)
    )
    routes = Map(rules(SmithyRule)).bind("lambda.us-east-1.amazonaws.com")
    assert compiled == []  # werkzeug's builders are generated source, compiled with `compile`
    rule, arguments = routes.match("/2015-03-31/functions/f1/invocations", method="POST", return_rule=True)
    assert isinstance(rule, SmithyRule) and arguments == {"FunctionName": "f1"}
    built = rule.build({"FunctionName": "f1"})
    assert compiled  # the first build compiled werkzeug's builder
    plain = Map(rules(Rule)).bind("lambda.us-east-1.amazonaws.com")
    [own] = plain.map.iter_rules()
    assert built == own.build({"FunctionName": "f1"}) == ("", "/2015-03-31/functions/f1/invocations")
    # moto's router, patched, serves a REST service.
    with mock_aws():
        client = boto3.client("lambda", region_name="us-east-1")
        assert client.list_functions()["Functions"] == []


def test_a_process_lists_the_installed_model_directories_from_the_cache_and_others_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process's first runtime listed the services three times (~47 ms): an installed data
    directory's list is read from the user's cache folder by the next process, and listed again
    once a service is added to it; a directory of the user's own is listed every time."""
    monkeypatch.setenv(user_cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(service_listing, "_listed", {})  # as in a new process
    listed = botocore.loaders.create_loader().list_available_services("service-2")
    assert listed == service_listing._original(botocore.loaders.Loader(), "service-2")  # botocore's own
    assert list((tmp_path / "cache" / "aws-listings").glob("*.json"))
    monkeypatch.setattr(service_listing, "_listed", {})
    walked: list[str] = []
    listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda path: walked.append(str(path)) or listdir(path))
    assert botocore.loaders.create_loader().list_available_services("service-2") == listed
    assert walked == []
    monkeypatch.setattr(os, "listdir", listdir)

    def service(root: Path, name: str) -> None:
        (root / name / "2020-01-01").mkdir(parents=True)
        (root / name / "2020-01-01" / "service-2.json").write_text("{}")

    installed, own = tmp_path / "installed", tmp_path / "own"
    service(installed, "first")
    service(own, "mine")
    monkeypatch.setattr(service_listing, "_PACKAGES", (*service_listing._PACKAGES, f"{installed}/"))

    def listing(root: Path) -> list[str]:
        monkeypatch.setattr(service_listing, "_listed", {})
        loader = botocore.loaders.Loader(extra_search_paths=[str(root)], include_default_search_paths=False)
        return loader.list_available_services("service-2")

    assert listing(installed) == ["first"] and listing(own) == ["mine"]
    service(installed, "second")  # the folder's modification time changes: listed again
    service(own, "yours")
    assert listing(installed) == ["first", "second"] and listing(own) == ["mine", "yours"]


def test_an_update_expression_is_parsed_once_per_text() -> None:
    make: Any = UpdateExpressionParser.make.__func__
    with mock_aws():
        client = _table_and_requests()
        before = make.cache_info().hits
        for n in range(2):
            client.update_item(
                TableName="t",
                Key={"pk": {"S": "k"}},
                UpdateExpression="SET parsed_once = :n",
                ExpressionAttributeValues={":n": {"N": str(n)}},
            )
    assert make.cache_info().hits >= before + 3  # checked and run twice, parsed once


def test_clause_counts_are_checked_once_an_update_and_still_refuse_two_of_a_kind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checks = _counted(monkeypatch, ActionCountValidator, "verify_action_counts")
    _twelve_counters_then_refused(checks, "ADD a :one ADD b :one", "ADD")


def _counted(monkeypatch: pytest.MonkeyPatch, validator: type, check: str) -> list[int]:
    """The calls of a validator's check on a node, one entry each."""
    checks: list[int] = []
    original = getattr(validator, check)

    def counting(self: Any, node: Any) -> Any:
        checks.append(1)
        return original(self, node)

    monkeypatch.setattr(validator, check, counting)
    return checks


def _twelve_counters_then_refused(checks: list[int], refused: str, error: str) -> None:
    """A 12-counter ADD is checked once (moto checks at every node of the clause chain), and
    the update `refused` is refused with `error`."""
    counters = ", ".join(f"c{n} :one" for n in range(12))
    with mock_aws():
        client = _table_and_requests()
        client.update_item(
            TableName="t",
            Key={"pk": {"S": "k"}},
            UpdateExpression=f"ADD {counters}",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )
        assert len(checks) == 1
        with pytest.raises(client.exceptions.ClientError, match=error):
            client.update_item(
                TableName="t",
                Key={"pk": {"S": "k"}},
                UpdateExpression=refused,
                ExpressionAttributeValues={":one": {"N": "1"}},
            )


# Updates of every kind the validators handle: functions, SET, REMOVE, ADD, DELETE, nested and
# missing paths, and the errors each validator raises (a key updated, a type mismatch, a path
# the item lacks, an empty string for a key).
_VALIDATED_UPDATES: list[dict[str, Any]] = [
    {"UpdateExpression": "SET r = :v", "ExpressionAttributeValues": {":v": {"N": "1"}}},
    {"UpdateExpression": "ADD c0 :a, c1 :a", "ExpressionAttributeValues": {":a": {"N": "2"}}},
    {
        "UpdateExpression": "SET f = if_not_exists(f, :v), l = list_append(l, :l)",
        "ExpressionAttributeValues": {":v": {"N": "5"}, ":l": {"L": [{"S": "x"}]}},
    },
    {
        "UpdateExpression": "SET n = n + :v, m.x = :s REMOVE gone",
        "ExpressionAttributeValues": {":v": {"N": "1"}, ":s": {"S": "y"}},
    },
    {"UpdateExpression": "DELETE s :d", "ExpressionAttributeValues": {":d": {"SS": ["a"]}}},
    {"UpdateExpression": "SET n = missing + :v", "ExpressionAttributeValues": {":v": {"N": "1"}}},
    {"UpdateExpression": "SET deep.er.path = :v", "ExpressionAttributeValues": {":v": {"N": "1"}}},
    {"UpdateExpression": "SET pk = :v", "ExpressionAttributeValues": {":v": {"S": "other"}}},
    {"UpdateExpression": "ADD n :v", "ExpressionAttributeValues": {":v": {"S": "text"}}},
    {
        "UpdateExpression": "SET n = :v + :w",
        "ExpressionAttributeValues": {":v": {"N": "1"}, ":w": {"S": "x"}},
    },
    {"UpdateExpression": "SET g = list_append(missing, :l)", "ExpressionAttributeValues": {":l": {"L": []}}},
]


def _validated(client: Any) -> list[Any]:
    """Each update's answer (the item after it, or moto's error), on a fresh item each time."""
    answers: list[Any] = []
    for update in _VALIDATED_UPDATES:
        key = {"pk": {"S": "k"}}
        client.put_item(
            TableName="t",
            Item={
                **key,
                "n": {"N": "1"},
                "s": {"SS": ["a", "b"]},
                "m": {"M": {"x": {"S": "y"}}},
                "l": {"L": []},
            },
        )
        try:
            client.update_item(TableName="t", Key=key, **update)
            answers.append(client.get_item(TableName="t", Key=key)["Item"])
        except client.exceptions.ClientError as e:
            answers.append(e.response["Error"])
    return answers


def test_an_updates_validators_with_nothing_to_handle_do_not_walk_it_and_answers_are_motos(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from moto.dynamodb.parsing.ast_nodes import DepthFirstTraverser  # type: ignore[attr-defined]  # untyped module
    from moto.dynamodb.parsing.validators import ExpressionPathResolver, Validator

    from toolpipe.infra.local.patches.speed import update_validator_skips

    walks: list[str] = []
    walk = DepthFirstTraverser.traverse_node_recursively

    def counted(self: Any, node: Any, child_id: int = -1) -> Any:
        if child_id == -1:  # a walk's root
            walks.append(type(self).__name__)
        return walk(self, node, child_id)

    monkeypatch.setattr(DepthFirstTraverser, "traverse_node_recursively", counted)

    def run() -> tuple[list[Any], list[str]]:
        with mock_aws():
            client = boto3.client("dynamodb", region_name="us-east-1")
            _table(client, "t")
            walks.clear()
            answers = _validated(client)
            return answers, list(walks)

    ours, our_walks = run()
    with monkeypatch.context() as unpatched:
        unpatched.setattr(Validator, "validate", update_validator_skips._motos_validate)
        unpatched.setattr(
            ExpressionPathResolver, "resolve_expression_path", update_validator_skips._motos_resolve
        )
        theirs, their_walks = run()
    assert ours == theirs
    errors = [answer["Message"] for answer in ours if "Message" in answer]
    assert len(errors) == 6, errors  # the key, two type mismatches, three paths the item lacks
    # A stamp's SET and a counter's ADD, as a run writes them: fewer walks, and none skipped
    # where a node of its own is there (a function, a missing path).
    assert len(our_walks) < len(their_walks) * 3 // 4, (len(our_walks), len(their_walks))
    assert "UpdateExpressionFunctionEvaluator" in our_walks and "NoneExistingPathChecker" in our_walks
    assert "TypeMismatchValidator" in our_walks


def test_overlapping_paths_are_checked_once_an_update_and_refused_with_motos_own_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A valid update is checked at its root only; one with overlaps (at any depth, several,
    under names or not) or an undefined name is refused with the error moto's walk raises."""
    from moto.dynamodb.parsing.validators import OverlappingPathsValidator

    from toolpipe.infra.local.patches.speed import update_overlap_check

    own = update_overlap_check._check_at_every_node
    names = {"#a": "a", "#b": "b", "#a2": "a"}
    for expression in [
        "ADD " + ", ".join(f"c{n} :one" for n in range(20)),
        "SET a = :one, b.c = :one REMOVE d ADD e :one",
        "SET #a = :one, #b = :one",
        "SET a = :one, b = :one, a = :one",  # the first and last actions
        "SET x = :one, y = :one, z.w = :one, z = :one",  # the last two, deep in the chain
        "SET a.b = :one, a = :one, c = :one, c.d = :one",  # two pairs
        "SET #a = :one REMOVE #a2",  # two names for one attribute
        "SET #a = :one, #a.b = :one",
        "SET #undefined = :one, a = :one",
        "SET a = :one ADD b :one, a :one",
    ]:
        outcomes: list[bool | str] = []
        for check in (own, update_overlap_check._check_at_the_root):
            tree = UpdateExpressionParser.make(expression)
            try:
                outcomes.append(check(OverlappingPathsValidator(names), tree) is tree)
            except Exception as refused:  # compared, whatever it is
                outcomes.append(f"{type(refused).__name__}: {refused}")
        assert outcomes[0] == outcomes[1], expression

    checks = _counted(monkeypatch, OverlappingPathsValidator, "check_for_overlapping_paths")
    update_overlap_check.install()
    _twelve_counters_then_refused(checks, "ADD c0 :one, c1 :one, c0 :one", r"overlap.*\[c0\].*\[c0\]")


def test_a_condition_is_parsed_once_per_text_and_values_and_judges_as_motos_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Conditions from the kept tree judge items as moto's own parse's do, report the same names
    and values used, and are refused alike; values of other placeholders do not split the
    kept tree, and values it names do."""
    from moto.dynamodb.comparisons import ConditionExpressionParser
    from moto.dynamodb.models.dynamo_type import Item

    from toolpipe.infra.local.patches.speed import condition_parse_cache

    items = [
        None,
        Item(
            {"S": "k"}, None, {"pk": {"S": "k"}, "n": {"N": "2"}, "s": {"S": "abc"}, "l": {"L": [{"N": "1"}]}}
        ),
        Item({"S": "k"}, None, {"pk": {"S": "k"}, "n": {"N": "9"}, "ab": {"SS": ["x", "y"]}}),
    ]
    names = {"#n": "n", "#s": "s", "#unused": "x"}
    values = {":a": {"N": "2"}, ":ab": {"S": "ab"}, ":three": {"N": "3"}, ":x": {"S": "x"}, ":t": {"S": "SS"}}
    for expression in [
        "attribute_exists(pk)",
        "attribute_not_exists(pk) OR #n = :a",
        "#n < :three AND begins_with(#s, :ab)",
        "NOT (#n BETWEEN :a AND :three)",
        "#n IN (:a, :three) AND size(l) = :a",
        "contains(ab, :x) OR attribute_type(ab, :t)",
        "#n <> :a AND (#s = :ab OR #n > :three)",
        "((#n = :a))",  # redundant parentheses: refused
        "#missing = :a",
        "#n = :missing",
        "#n = = :a",
        "",
    ]:
        outcomes = []
        for parse in (
            condition_parse_cache._motos_own,
            condition_parse_cache.parse,
            condition_parse_cache.parse,
        ):
            parser = ConditionExpressionParser(expression, names, values)
            try:
                condition = parse(parser)
                outcomes.append(
                    (
                        [condition.expr(item) for item in items],
                        parser.expr_attr_names_found,
                        parser.expr_attr_values_found,
                    )
                )
            except Exception as refused:  # compared, whatever it is
                outcomes.append(f"{type(refused).__name__}: {refused}")
        assert outcomes[0] == outcomes[1] == outcomes[2], expression

    lexed: list[str] = []
    lex = ConditionExpressionParser._lex_condition_expression

    def counting(self: ConditionExpressionParser) -> Any:
        lexed.append(str(self.condition_expression))
        return lex(self)

    monkeypatch.setattr(ConditionExpressionParser, "_lex_condition_expression", counting)
    item = items[1]

    def judge(expression: str, values: dict[str, Any]) -> bool:
        return bool(condition_parse_cache.parse(ConditionExpressionParser(expression, {}, values)).expr(item))

    assert judge("n = :a", {":a": {"N": "2"}, ":other": {"N": "1"}})
    assert judge("n = :a", {":a": {"N": "2"}, ":other": {"N": "7"}})  # another value elsewhere: kept
    assert lexed == ["n = :a"]
    assert not judge("n = :a", {":a": {"N": "3"}})  # the value it names: parsed again
    assert lexed == ["n = :a"] * 2
    # ":a" is in the text "s = :ab": its value is part of the key too (a superset is harmless).
    assert judge("s = :ab", {":ab": {"S": "abc"}, ":a": {"N": "1"}})
    assert judge("s = :ab", {":ab": {"S": "abc"}, ":a": {"N": "5"}})
    assert not judge("s = :ab", {":ab": {"S": "abd"}, ":a": {"N": "5"}})
    assert lexed == ["n = :a"] * 2 + ["s = :ab"] * 3


def test_a_kept_condition_judges_with_the_requests_own_values_and_keeps_names_apart_from_values() -> None:
    """The review's cases: a set written with the condition's own value, then added to, must
    not change what the kept condition compares with; a transaction whose values hold a
    "#name" key is judged on its own names; a large value is not kept."""
    from moto.dynamodb.comparisons import ConditionExpressionParser

    from toolpipe.infra.local.patches.speed import condition_parse_cache

    condition_parse_cache.install()
    key = {"pk": {"S": "k"}}
    with mock_aws():
        client = _table_and_requests()
        condition = "attribute_not_exists(s) OR s <> :v"
        client.update_item(
            TableName="t",
            Key=key,
            UpdateExpression="SET s = :v",
            ConditionExpression=condition,
            ExpressionAttributeValues={":v": {"SS": ["a"]}},
        )
        client.update_item(
            TableName="t",
            Key=key,
            UpdateExpression="ADD s :w",
            ExpressionAttributeValues={":w": {"SS": ["b"]}},
        )
        client.update_item(  # {"a", "b"} <> {"a"}: allowed, as moto's own parse judges it
            TableName="t",
            Key=key,
            UpdateExpression="SET s = :v",
            ConditionExpression=condition,
            ExpressionAttributeValues={":v": {"SS": ["a"]}},
        )
        assert client.get_item(TableName="t", Key=key)["Item"]["s"] == {"SS": ["a"]}

        client.put_item(TableName="t", Item={"pk": {"S": "k"}, "x": {"S": "1"}, "y": {"S": "2"}})
        judged = []
        for attribute in ("x", "y"):
            try:
                client.transact_write_items(
                    TransactItems=[
                        {
                            "ConditionCheck": {
                                "TableName": "t",
                                "Key": key,
                                "ConditionExpression": "#a = :v",
                                "ExpressionAttributeNames": {"#a": attribute},
                                "ExpressionAttributeValues": {":v": {"S": "1"}, "#a": {"S": "junk"}},
                            }
                        }
                    ]
                )
                judged.append(True)
            except client.exceptions.TransactionCanceledException:
                judged.append(False)
        assert judged == [True, False]

    large = ConditionExpressionParser("n = :v", {}, {":v": {"S": "x" * condition_parse_cache.MAX_KEY}})
    assert condition_parse_cache._key(large) is None
    assert condition_parse_cache._key(ConditionExpressionParser("n = :v", {}, {":v": {"S": "x"}})) is not None


def _updates(client: Any, table: str) -> list[Any]:
    """The answers to updates of every kind of ReturnValues, and the item they leave."""
    key = {"pk": {"S": "k"}}
    client.put_item(
        TableName=table, Item={**key, "n": {"N": "1"}, "s": {"SS": ["a"]}, "m": {"M": {"x": {"S": "y"}}}}
    )
    answers = []
    for returned in (None, "NONE", "ALL_OLD", "UPDATED_OLD", "ALL_NEW", "UPDATED_NEW"):
        extra = {"ReturnValues": returned} if returned else {}
        answer = client.update_item(
            TableName=table,
            Key=key,
            UpdateExpression="ADD n :one, s :b SET m.x = :z REMOVE gone",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":one": {"N": "1"}, ":b": {"SS": [f"b{returned}"]}, ":z": {"S": "z"}},
            **extra,
        )
        answers.append({k: v for k, v in answer.items() if k != "ResponseMetadata"})
    answers.append(
        client.update_item(
            TableName=table,
            Key={"pk": {"S": "new"}},
            UpdateExpression="SET n = :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
            ReturnValues="ALL_OLD",
        )
    )
    answers[-1].pop("ResponseMetadata")
    answers.append(client.get_item(TableName=table, Key=key)["Item"])
    return answers


def test_an_update_that_returns_nothing_copies_nothing_and_every_answer_is_motos(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each kind of ReturnValues answers as moto's own update does; one returning none copies
    no item (the table has no stream), and a table with a stream still records the old image."""
    import copy

    import moto.dynamodb.models
    import moto.dynamodb.responses
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.dynamo_type import Item
    from moto.dynamodb.responses import DynamoHandler

    from toolpipe.infra.local.patches.speed import update_item_copies

    update_item_copies.install()
    copies: list[int] = []
    item_copy = Item.__deepcopy__

    def counted(self: Item, memo: Any) -> Any:
        copies.append(1)
        return item_copy(self, memo)

    monkeypatch.setattr(Item, "__deepcopy__", counted)
    with mock_aws():
        ours = _updates(_table_and_requests(), "t")
        client = boto3.client("dynamodb", region_name="us-east-1")
        # moto's own copies twice each (the answer's, the stream's); the table has no stream,
        # and only an answer of the old values needs the old item.
        for returned, copied in ((None, []), ("ALL_OLD", [1]), ("ALL_NEW", [])):
            copies.clear()
            client.update_item(
                TableName="t",
                Key={"pk": {"S": "k"}},
                UpdateExpression="SET n = :one",
                ExpressionAttributeValues={":one": {"N": "5"}},
                **({"ReturnValues": returned} if returned else {}),
            )
            assert copies == copied, returned

        _table(client, "streamed", stream="NEW_AND_OLD_IMAGES")
        streamed = _updates(client, "streamed")
        from moto.dynamodb.models import dynamodb_backends

        shard = dynamodb_backends["123456789012"]["us-east-1"].tables["streamed"].stream_shard
        records = [record.to_json() for record in shard.items]  # as the streams API reads them
        old_images = [
            r["dynamodb"].get("OldImage", {}).get("n") for r in records if r["eventName"] == "MODIFY"
        ]
        assert old_images == [{"N": str(n)} for n in range(1, 7)]

    monkeypatch.setattr(DynamoHandler, "update_item", update_item_copies._motos_handler)
    monkeypatch.setattr(DynamoDBBackend, "update_item", update_item_copies._motos_update)
    monkeypatch.setattr(moto.dynamodb.responses, "copy", copy)
    with mock_aws():
        theirs = _updates(_table_and_requests(), "t")
    assert ours == theirs
    assert json.loads(json.dumps(streamed).replace('"streamed"', '"t"')) == ours  # the table's name aside


def test_an_update_run_inside_another_copies_for_its_own_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The review's case: a stream's trigger runs its function during the update that fed it;
    an update there asking for the old item gets it, though the outer update asked for none."""
    from moto.dynamodb.models.table import StreamShard

    from toolpipe.infra.local.patches.speed import update_item_copies

    update_item_copies.install()
    nested: list[Any] = []
    add = StreamShard.add

    def add_then_update(self: StreamShard, old: Any, new: Any) -> None:
        add(self, old, new)
        answer = client.update_item(
            TableName="t",
            Key={"pk": {"S": "k"}},
            UpdateExpression="SET n = :three",
            ExpressionAttributeValues={":three": {"N": "3"}},
            ReturnValues="ALL_OLD",
        )
        nested.append(answer.get("Attributes"))

    monkeypatch.setattr(StreamShard, "add", add_then_update)
    with mock_aws():
        client = _table_and_requests()
        _table(client, "streamed", stream="NEW_IMAGE")
        client.update_item(
            TableName="streamed",
            Key={"pk": {"S": "a"}},
            UpdateExpression="SET n = :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )
    # Two stream records (the new item's insert, then its update), each a nested update.
    assert nested == [{"pk": {"S": "k"}, "n": {"N": "2"}}, {"pk": {"S": "k"}, "n": {"N": "3"}}]


def test_an_item_is_projected_from_the_attributes_its_paths_name_as_motos_own_projects_it() -> None:
    from moto.dynamodb.models.dynamo_type import DynamoType, Item

    from toolpipe.infra.local.patches.speed import item_projection

    attributes = {
        "pk": {"S": "k"},
        "n": {"N": "1.50"},
        "b": {"B": "aGk="},
        "flag": {"BOOL": False},
        "none": {"NULL": True},
        "ss": {"SS": ["a", "b"]},
        "ns": {"NS": ["1", "2"]},
        "l": {"L": [{"S": "x"}, {"M": {"deep": {"N": "3"}, "other": {"S": "o"}}}, {"L": [{"N": "4"}]}]},
        "m": {"M": {"a": {"M": {"b": {"S": "c"}, "d": {"N": "5"}}}, "e": {"L": []}}},
        "a[1]": {"S": "a name with brackets"},
    }
    item = Item(DynamoType({"S": "k"}), None, attributes)
    for paths in [
        [["pk"], ["n"]],
        [["m", "a", "b"], ["m", "e"]],
        [["m", "a"], ["m", "a", "d"]],  # overlapping
        [["l[1]", "deep"], ["l[2]"], ["l[9]"]],
        [["l[1]"], ["l[1]", "other"]],
        [["missing"], ["m", "missing"]],
        [["n", "deeper"]],  # into a number: moto's own raises
        [["a[1]"], ["b"], ["flag"], ["none"], ["ss"], ["ns"]],
        [["ss"], ["ss"]],
        [],
    ]:
        outcomes: list[Any] = []
        for project in (item_projection.project, item_projection._motos_own):
            try:
                projected = project(item, paths).to_json()["Attributes"]
                outcomes.append((projected, list(projected)))  # the same attributes, in the same order
            except Exception as refused:  # compared, whatever it is
                outcomes.append(f"{type(refused).__name__}: {refused}")
        assert outcomes[0] == outcomes[1], paths
    # The one difference (the module's docstring): a number AWS would have refused fails only a
    # projection that names it.
    stored = Item(DynamoType({"S": "k"}), None, {**attributes, "big": {"N": "1" * 40}})
    assert item_projection.project(stored, [["n"]]).to_json()["Attributes"] == {"n": {"N": "1.50"}}
    with pytest.raises(decimal.Inexact):
        item_projection._motos_own(stored, [["n"]])
    with pytest.raises(decimal.Inexact):
        item_projection.project(stored, [["big"]])


def test_item_answers_skip_motos_serializer(monkeypatch: pytest.MonkeyPatch) -> None:
    dumped: list[Any] = []
    as_wire = item_answers._as_wire

    def recording(value: Any) -> Any:
        dumped.append(value)
        return as_wire(value)

    monkeypatch.setattr(item_answers, "_as_wire", recording)
    with mock_aws():
        client = _table_and_requests()
        item = client.get_item(TableName="t", Key={"pk": {"S": "k"}})["Item"]
    assert item == {"pk": {"S": "k"}, "n": {"N": "2"}}
    assert {"Item": item} in dumped  # the answer as moto built it, dumped without the serializer


def _prepared(url: str, target: str | None = None, body: bytes = b"{}") -> Any:
    from botocore.awsrequest import AWSPreparedRequest
    from botocore.compat import HTTPHeaders

    headers = HTTPHeaders()
    headers["Content-Type"] = "application/x-amz-json-1.0"
    if target:
        headers["X-Amz-Target"] = target
    return AWSPreparedRequest(method="POST", url=url, headers=headers, body=body, stream_output=False)


def test_a_requests_service_is_found_once_per_url_and_answers_as_motos_own_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """moto tried every service's URL patterns (DynamoDB is its 52nd of 183) and compiled the
    service's URLs on each request: the answer is kept per URL, and requests are served as before."""
    from moto import backend_index
    from moto.core.botocore_stubber import BotocoreStubber

    speed.service_routes.install()  # as a runtime's start does (process-wide, once)
    assert BotocoreStubber.process_request is speed.service_routes.process_request
    own_search: Any = speed.service_routes._motos_own  # moto's method, before the patch
    stubber = BotocoreStubber()
    with mock_aws():
        client = _table_and_requests()
        # The same answer as moto's own search, for services found at different depths of it.
        for url, target in [
            ("https://dynamodb.us-east-1.amazonaws.com/", "DynamoDB_20120810.ListTables"),
            ("https://sqs.us-east-1.amazonaws.com/", "AmazonSQS.ListQueues"),
            ("https://states.us-east-1.amazonaws.com/", "AWSStepFunctions.ListStateMachines"),
            ("https://notaservice.us-east-1.amazonaws.com/", None),  # AWS's domain, no service
            ("http://127.0.0.1:9/anything", None),  # not moto's to serve
        ]:
            ours, theirs = (
                method(stubber, _prepared(url, target))
                for method in (BotocoreStubber.process_request, own_search)
            )
            if theirs is None or theirs[0] == 404:
                assert ours == theirs, url
            else:
                assert ours is not None, url
                assert (ours[0], json.loads(ours[2])) == (theirs[0], json.loads(theirs[2])), url

        # A second request to a URL searches nothing.
        searched: list[str] = []
        patterns = backend_index.backend_url_patterns

        class Counted(list[Any]):
            def __iter__(self) -> Any:
                searched.append("patterns")
                return super().__iter__()

        monkeypatch.setattr(backend_index, "backend_url_patterns", Counted(patterns))
        assert client.get_item(TableName="t", Key={"pk": {"S": "k"}})["Item"]["n"] == {"N": "2"}
        assert searched == []
        # A REST service (Lambda, by path) and one under its own path scheme (S3) are served.
        assert boto3.client("lambda", region_name="us-east-1").list_functions()["Functions"] == []
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="runs-bucket")
        s3.put_object(Bucket="runs-bucket", Key="k/1.txt", Body=b"one")
        assert s3.get_object(Bucket="runs-bucket", Key="k/1.txt")["Body"].read() == b"one"


@pytest.mark.parametrize(
    "config",
    [
        {"passthrough": {"services": ["sqs"]}},
        {"service_whitelist": ["dynamodb"]},
        {"passthrough": {"urls": [r"https://sqs\..*"]}},
    ],
    ids=["passthrough-service", "allow-list", "passthrough-url"],
)
def test_the_passthrough_and_allow_list_settings_answer_as_motos_own_search(
    monkeypatch: pytest.MonkeyPatch, config: dict[str, Any]
) -> None:
    """moto reads them for each service whose host matches, before it looks for a URL of that
    service: a path SQS does not serve is passed through (or refused) as a served one is."""
    from moto.core.botocore_stubber import BotocoreStubber
    from moto.core.config import default_user_config
    from moto.core.exceptions import ServiceNotWhitelisted

    speed.service_routes.install()
    own_search: Any = speed.service_routes._motos_own
    stubber = BotocoreStubber()
    monkeypatch.setitem(default_user_config, "core", config)
    with mock_aws():
        for url, target in [
            ("https://sqs.us-east-1.amazonaws.com/", "AmazonSQS.ListQueues"),
            ("https://sqs.us-east-1.amazonaws.com/not/a/queue/path", None),
        ]:
            answers = []
            for method in (BotocoreStubber.process_request, own_search):
                try:
                    answer = method(stubber, _prepared(url, target))
                    answers.append(None if answer is None else answer[0])
                except ServiceNotWhitelisted as refused:
                    answers.append(str(refused))
            assert answers[0] == answers[1], (url, answers)
            assert answers[0] is None or "not whitelisted" in str(answers[0]), (url, answers)


def test_a_long_url_is_searched_each_time_and_not_kept() -> None:
    """A tool may make any number of long S3 keys: their URLs are not kept for the process's life."""
    routes = speed.service_routes
    long_key = "https://runs-bucket.s3.amazonaws.com/" + "k" * routes.MAX_KEPT_URL
    before = routes._kept_route.cache_info().currsize
    with mock_aws():
        assert [service for service, _ in routes.route(long_key)] == ["s3"]
        assert routes.route(long_key)[-1][1] is not None
    assert routes._kept_route.cache_info().currsize == before


def _environ_as_compared(request: Any) -> dict[str, Any]:
    """A request's environment with its input stream as the bytes left in it (a stream is a new
    object each time) and without the request's link to itself."""
    environ = dict(request.environ)
    environ.pop("werkzeug.request", None)
    stream = environ.pop("wsgi.input")
    at = stream.tell()
    environ["wsgi.input"] = (at, stream.read())
    stream.seek(at)  # the request is served after
    return environ


def test_a_requests_environment_is_built_as_werkzeugs_builder_builds_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every request of each kind the runtime sends (JSON, query, REST and S3 bodies, odd keys,
    a checksummed upload) is built both ways, and the two environments are the same."""
    from botocore.compat import HTTPHeaders
    from moto.core.request import Request

    from toolpipe.infra.local.patches.speed import request_environ

    request_environ.install()
    own = request_environ._motos_own
    compared: list[str] = []

    def both(cls: type[Request], method: str, url: str, headers: Any, body: Any = None) -> Request:
        if hasattr(body, "read"):
            body = body.read()  # read once; both ways take the bytes, as moto's own does
        ours = request_environ.from_primitives(cls, method, url, headers, body)
        theirs = own(cls, method, url, headers, body)
        assert type(ours) is type(theirs)
        assert _environ_as_compared(ours) == _environ_as_compared(theirs), url
        assert list(ours.headers) == list(theirs.headers), url  # moto keeps each header's own name
        compared.append(url)
        return ours

    monkeypatch.setattr(Request, "from_primitives", classmethod(both))
    with mock_aws():
        client = _table_and_requests()
        client.put_item(TableName="t", Item={"pk": {"S": "é ü ☃"}})
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="runs-bucket")
        for key in ["runs/é %2F;v=1 +x", "//two-slashes", "a?b#c", "plain"]:
            s3.put_object(Bucket="runs-bucket", Key=key, Body=b"body")  # a checksummed body
            assert s3.get_object(Bucket="runs-bucket", Key=key)["Body"].read() == b"body"
            s3.head_object(Bucket="runs-bucket", Key=key)
        s3.put_object(Bucket="runs-bucket", Key="empty", Body=b"")
        assert len(s3.list_objects_v2(Bucket="runs-bucket", Prefix="runs/é")["Contents"]) == 1
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue = sqs.create_queue(QueueName="q")["QueueUrl"]
        sqs.send_message(QueueUrl=queue, MessageBody="ü")
        assert sqs.receive_message(QueueUrl=queue)["Messages"][0]["Body"] == "ü"
        boto3.client("lambda", region_name="us-east-1").list_functions()
        boto3.client("events", region_name="us-east-1").put_events(
            Entries=[{"Source": "s", "DetailType": "d", "Detail": "{}"}]
        )
        boto3.client("stepfunctions", region_name="us-east-1").list_state_machines()
    assert len(compared) >= 25

    # Shapes botocore does not send, each built both ways or refused alike.
    def headers(*pairs: tuple[str, Any]) -> HTTPHeaders:
        built = HTTPHeaders()
        for key, value in pairs:
            built[key] = value  # appended: a name may come twice
        return built

    for method, url, sent, body in [
        ("POST", "http://127.0.0.1:5000/p;x=1?q=é&r", headers(("X-A", b"bytes"), ("x-a", "two")), "text é"),
        ("GET", "http://h:notaport/", headers(("Transfer-Encoding", "chunked")), None),
        ("GET", "https://h//two-slashes/x", headers(), None),  # werkzeug reads a host from the path
        ("GET", "https://xn--bcher-kva.example/", headers(("Content-Length", "9")), b""),
        ("GET", "https://bücher.example:8443/ä", headers(), b"x"),
        ("POST", "https://h/", headers(("Content-Type", "application/x-www-form-urlencoded")), b""),
        ("POST", "https://h/", headers(("Content-Type", "text/plain"), ("content-type", "a/b")), b"1"),
        ("GET", "https://h/", headers(("X-A", "a\r\nb")), None),
    ]:
        ours, theirs = (
            _built(make, method, url, sent, body) for make in (request_environ.from_primitives, own)
        )
        assert ours == theirs, url
    # An empty multipart body is encoded by werkzeug with a random boundary: moto's path builds it.
    multipart = headers(("Content-Type", "multipart/form-data; boundary=b"))
    assert request_environ.environ("POST", "https://h/", multipart, b"") is None
    # A line break in a header value is refused alike.
    assert _built(request_environ.from_primitives, "GET", "https://h/", headers(("X-A", "a\r\nb")), None) == (
        "ValueError: Header values must not contain newline characters."
    )


def _built(make: Any, *args: Any) -> dict[str, Any] | str:
    from moto.core.request import Request

    try:
        return _environ_as_compared(make(Request, *args))
    except ValueError as refused:
        return f"ValueError: {refused}"
