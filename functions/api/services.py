"""What the API's routes call into, built once per cold start from the function's settings.

The handler builds one `ApiServices` when it is imported (a cold start) and hands it to every
request through the resolver's context; the routes read it with `services_of`. Each service is
built at its first use: a request for runs never builds the approval page.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING

from aws_lambda_powertools.event_handler.api_gateway import Router

from toolpipe.functions.api.page.approval_page import ApprovalPage
from toolpipe.shared import collector
from toolpipe.shared.aws_clients import AwsClients
from toolpipe.shared.costs.prices import PriceTable
from toolpipe.shared.deferred.models import waiting_for
from toolpipe.shared.history import DynamoHistoryStore
from toolpipe.shared.runs.cancel import RunCanceller
from toolpipe.shared.runs.deferred import DeferredCalls
from toolpipe.shared.runs.delete import RunDeleter
from toolpipe.shared.runs.factory import (
    PRESIGN_CONFIG,
    build_deferred_calls,
    build_run_canceller,
    build_run_deleter,
    build_run_forker,
    build_run_resumer,
    build_run_starter,
    build_store,
)
from toolpipe.shared.runs.fork import RunForker
from toolpipe.shared.runs.report import URL_SECONDS, RunReader
from toolpipe.shared.runs.resume import RunResumer
from toolpipe.shared.runs.starter import RunStarter
from toolpipe.shared.runs.timeline_reader import TimelineReader
from toolpipe.shared.settings import (
    ApiSettings,
    ApprovalLinkSettings,
    CallTimeouts,
    EventSettings,
    QuotaSettings,
    StateMachineSettings,
    StoreSettings,
)

if TYPE_CHECKING:
    from toolpipe.shared.deferred.store import DynamoApprovalStore

# The key of the services in the resolver's context (`app.append_context`).
CONTEXT_KEY = "services"


@dataclass(frozen=True)
class FunctionSettings:
    """Every setting the API reads, from the environment once: a missing one fails the cold
    start, not the first request that needs it."""

    store: StoreSettings
    machine: StateMachineSettings
    api: ApiSettings
    events: EventSettings
    links: ApprovalLinkSettings
    quota: QuotaSettings
    prices: PriceTable

    @classmethod
    def from_env(cls) -> "FunctionSettings":
        return cls(
            store=StoreSettings.from_env(),
            machine=StateMachineSettings.from_env(),
            api=ApiSettings.from_env(),
            events=EventSettings.from_env(),
            links=ApprovalLinkSettings.from_env(),
            quota=QuotaSettings.from_env(),
            prices=PriceTable.from_env(),
        )


class ApiServices:
    """The services behind the routes, each built at its first use and kept for the warm
    invocations that follow."""

    def __init__(self, settings: FunctionSettings) -> None:
        self.settings = settings
        # One client per service for every service below, and for the meter's counts.
        self.aws = AwsClients()

    @collector.cold_property
    def costs(self) -> DynamoHistoryStore:
        """Where the meter adds each run's counts at a request's end (shared/costs/invocation.py)."""
        return build_store(self.settings.store, aws=self.aws)

    @collector.cold_property
    def starter(self) -> RunStarter:
        s = self.settings
        return build_run_starter(s.store, s.machine, s.events, s.quota, aws=self.aws)

    @collector.cold_property
    def canceller(self) -> RunCanceller:
        s = self.settings
        return build_run_canceller(s.store, s.machine, s.events, s.api.admin_principal, aws=self.aws)

    @collector.cold_property
    def resumer(self) -> RunResumer:
        s = self.settings
        return build_run_resumer(s.store, s.machine, s.events, s.api.admin_principal, s.quota, aws=self.aws)

    @collector.cold_property
    def forker(self) -> RunForker:
        s = self.settings
        return build_run_forker(s.store, s.machine, s.events, s.quota, aws=self.aws)

    @collector.cold_property
    def deleter(self) -> RunDeleter:
        return build_run_deleter(self.settings.store, self.settings.api.admin_principal, aws=self.aws)

    @collector.cold_property
    def reader(self) -> RunReader:
        bucket = self.settings.store.bucket_name
        # SigV4 signs URLs that work in every region and with the function's session credentials.
        s3 = self.aws.client("s3", PRESIGN_CONFIG)

        def presign(key: str) -> str:
            return str(
                s3.generate_presigned_url(
                    "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=URL_SECONDS
                )
            )

        return RunReader(
            build_store(self.settings.store, aws=self.aws),
            presign,
            self.settings.api.admin_principal,
            self.settings.prices,
            waits=lambda run_id: waiting_for(self._approval_records.waiting(run_id)),
        )

    @collector.cold_property
    def _approval_records(self) -> "DynamoApprovalStore":
        from toolpipe.shared.deferred.store import DynamoApprovalStore

        # Through the function's one table resource, watched by the cost meter as every other
        # service's (`AwsClients.table`); a GET names no run, so no run's cost counts it.
        return DynamoApprovalStore(self.aws.table(self.settings.store.table_name))

    @collector.cold_property
    def timeline(self) -> TimelineReader:
        s = self.settings
        return TimelineReader(
            build_store(s.store, aws=self.aws), self._approval_records, s.api.admin_principal, s.prices
        )

    @collector.cold_property
    def approvals(self) -> DeferredCalls:
        s = self.settings
        return build_deferred_calls(
            s.store, s.events, CallTimeouts(), s.api.admin_principal, s.links, aws=self.aws
        )

    @collector.cold_property
    def page(self) -> ApprovalPage:
        return ApprovalPage(self.approvals)


def services_of(router: Router) -> ApiServices:
    """The services the handler put in this request's context."""
    services = router.context[CONTEXT_KEY]
    assert isinstance(services, ApiServices), "the handler puts its services in the context"
    return services
