"""The approval page a person opens from the signed link: GET shows the call, POST decides.

GET (and HEAD) never change state: mail scanners and link previews open links. A POST needs
the link's signature, the CSRF cookie the GET set and the token derived from it in the form,
and no foreign `Origin`; the decision then goes through `DeferredCalls` like any other (first
decision wins, one answer to the waiting task). This module says which page, with which status;
`views` renders it (templates, autoescaped).
"""

import dataclasses
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from toolpipe.functions.api.page import views
from toolpipe.functions.api.page.answer_form import posted_answer, render
from toolpipe.shared.deferred.answers import question_of
from toolpipe.shared.deferred.links import (
    TOKEN_PATTERN,
    ApprovalLinks,
    LinkExpiredError,
    LinkInvalidError,
    SigningKeyError,
)
from toolpipe.shared.deferred.models import (
    APPROVAL_ID_PATTERN,
    MAX_REASON_CHARS,
    Approval,
    ApprovalAlreadyDecidedError,
    ApprovalKind,
    ApprovalNotFoundError,
    ApprovalStatus,
    DeliveryFailedError,
    DeliveryUncertainError,
    InvalidAnswerError,
    InvalidEditError,
    LinkEditsOffError,
)
from toolpipe.shared.runs.deferred import DeferredCalls

logger = logging.getLogger(__name__)

CSRF_COOKIE = "toolpipe_csrf"
# The run's request as the page shows it: enough to recognise it, not a whole document.
INPUT_CHARS = 2_000
_ID = re.compile(APPROVAL_ID_PATTERN)


@dataclass(frozen=True)
class PageAnswer:
    status: int
    html: str
    # A CSRF cookie value to set (the GET of a browser that has none yet).
    set_cookie: str | None = None
    headers: Mapping[str, str] = field(default_factory=lambda: dict(views.HEADERS))


@dataclass(frozen=True)
class PageRequest:
    """One request to the page, as the handler read it from the event."""

    approval_id: str
    exp: str | None
    sig: str | None
    cookie: str | None
    kid: str | None = None
    source_ip: str | None = None
    origin: str | None = None
    host: str | None = None
    form: Mapping[str, str] = field(default_factory=dict)


class ApprovalPage:
    def __init__(self, service: DeferredCalls, clock: Callable[[], float] = time.time) -> None:
        self._service = service
        self._clock = clock

    def show(self, request: PageRequest) -> PageAnswer:
        """GET or HEAD: the call and the forms (or, once decided, who decided). Reads only."""
        checked = self._checked(request, decided_after_expiry=True)
        if isinstance(checked, PageAnswer):
            return checked
        approval = checked
        question = approval.kind is ApprovalKind.HUMAN
        outcome = self._answered_page if question else self._decided_page
        if approval.status is not ApprovalStatus.PENDING:
            return PageAnswer(200, outcome(approval, None))
        ended = self._service.run_ended(approval)
        if ended is not None:
            # Nothing waits any more: say so, with no forms to fill in for nothing.
            what = "answer" if question else "decide"
            return PageAnswer(410, outcome(approval, f"Run ended ({ended.value}): nothing to {what}"))
        cookie = request.cookie if request.cookie and TOKEN_PATTERN.fullmatch(request.cookie) else None
        new_cookie = None if cookie else self._links().new_cookie()
        show = self._question_page if question else self._form_page
        return PageAnswer(200, show(approval, request, cookie or new_cookie or ""), new_cookie)

    def submit(self, request: PageRequest) -> PageAnswer:
        """POST: a decision from the page's forms, taken once it passed every check."""
        if request.origin is not None and not _same_host(request.origin, request.host):
            return error_page(403, "Refused", "This form was sent from another site.")
        checked = self._checked(request)
        if isinstance(checked, PageAnswer):
            return checked
        approval = checked
        links = self._links()
        if not links.check_csrf(approval.approval_id, request.cookie, request.form.get("csrf")):
            return error_page(
                403, "Refused", "The form's security token is missing or does not match: open the link again."
            )
        if approval.kind is ApprovalKind.HUMAN:
            return self._submit_answer(approval, request)
        action = request.form.get("action")
        reason = arguments = None
        if action == "deny":
            # Browsers send a textarea's line breaks as CRLF; its maxlength counts each as one.
            reason = (request.form.get("reason") or "").replace("\r\n", "\n").strip()
            if not reason or len(reason) > MAX_REASON_CHARS:
                return self._again(approval, request, f"A reason is 1 to {MAX_REASON_CHARS:,} characters.")
        elif action == "edit":
            arguments = request.form.get("arguments") or ""
        elif action != "approve":
            return self._again(approval, request, "Choose Approve, Deny or Approve with these arguments.")
        try:
            decided = self._service.decide_by_link(
                approval, request.source_ip, action != "deny", reason, arguments
            )
        except InvalidEditError as e:
            return self._again(approval, request, f"Not decided: {e}")
        except LinkEditsOffError as e:
            return self._again(approval, request, f"Not decided: {e}", 403)
        except DeliveryFailedError:
            message = "Not decided: the run could not be told; nothing was recorded. Send it again."
            return self._again(approval, request, message, 503)
        except DeliveryUncertainError as e:
            return PageAnswer(503, self._resend_page(self._service.record(approval.approval_id), request, e))
        except ApprovalAlreadyDecidedError as e:
            current = self._service.record(approval.approval_id)
            return PageAnswer(409, self._decided_page(current, f"Already decided: {e}"))
        title = "Denied" if decided.status is ApprovalStatus.DENIED else "Approved"
        if decided.arguments is not None:
            title = "Approved with edited arguments"
        return PageAnswer(200, self._decided_page(decided, title))

    # --- checks ---------------------------------------------------------------------------

    def _links(self) -> ApprovalLinks:
        assert self._service.links is not None  # `_checked` answered already when there is none
        return self._service.links

    def _checked(self, request: PageRequest, decided_after_expiry: bool = False) -> Approval | PageAnswer:
        """The approval the request's link names, or the error page: the same 403 for an
        unknown id as for a bad signature (ids cannot be probed), 410 once expired (unless
        `decided_after_expiry` and it was decided: a valid link may still show the outcome)."""
        links = self._service.links
        if links is None:
            return error_page(404, "Not available", "Approval links are not enabled here.")
        if not _ID.fullmatch(request.approval_id):
            return _invalid()
        try:
            approval = self._service.record(request.approval_id)
            links.check(approval, request.exp, request.sig, self._clock(), request.kid)
        except (ApprovalNotFoundError, LinkInvalidError):
            return _invalid()
        except SigningKeyError as e:
            logger.error("approval page unavailable: %s", e)
            return error_page(
                503,
                "Not available",
                "Approval links cannot be checked right now (a configuration error). Nothing was "
                "changed; try again later, or decide through the API.",
            )
        except LinkExpiredError as e:
            if decided_after_expiry and approval.status not in (
                ApprovalStatus.PENDING,
                ApprovalStatus.EXPIRED,
            ):
                return approval
            return error_page(410, "Link expired", f"{str(e)[0].upper()}{str(e)[1:]}.")
        return approval

    # --- pages ------------------------------------------------------------------------------

    def _again(self, approval: Approval, request: PageRequest, error: str, status: int = 400) -> PageAnswer:
        """The forms again with a one-line error, keeping what the person typed: nothing was
        decided."""
        cookie = request.cookie or ""
        return PageAnswer(status, self._form_page(approval, request, cookie, error))

    def _resend_page(self, approval: Approval, request: PageRequest, error: DeliveryUncertainError) -> str:
        """A decision (or answer) recorded whose delivery is uncertain: one button sends the
        same form again, which re-delivers it."""
        same = [
            (name, value) for name, value in request.form.items() if name not in ("exp", "kid", "sig", "csrf")
        ]
        return views.render(
            "resend.html",
            title=f"Recorded {error.status.value}; delivery uncertain",
            link=self._hidden(approval, request, request.cookie or ""),
            form=same,
            rows=self._facts(approval),
        )

    def _facts(self, approval: Approval) -> list[tuple[str, str]]:
        run_input = self._service.run_input(approval)
        if run_input is not None and len(run_input) > INPUT_CHARS:
            run_input = run_input[: INPUT_CHARS - 1] + "…"
        rows = [
            ("Tool", approval.tool),
            ("What it does", approval.tool_description or "(no description)"),
            ("Agent", approval.agent or "(not recorded)"),
            ("Run", approval.run_id),
            ("Request", run_input if run_input is not None else "(not available)"),
            ("Requested by", approval.requester or "(unknown)"),
            ("Status", approval.status.value),
            ("Expires", approval.expires_at),
        ]
        if approval.decided_by:
            rows.append(("Decided by", approval.decided_by))
            rows.append(("Decided at", approval.decided_at or ""))
        if approval.reason:
            rows.append(("Reason", approval.reason))
        return rows

    def _arguments(self, approval: Approval) -> str:
        call = self._service.call_of(approval)
        return _pretty(call.arguments if call is not None else approval.arguments_preview)

    def _form_page(
        self, approval: Approval, request: PageRequest, cookie: str, error: str | None = None
    ) -> str:
        arguments = self._arguments(approval)
        # After an error the forms keep what the person typed: nothing they wrote is lost.
        edited = request.form.get("arguments") if error and request.form.get("action") == "edit" else None
        return views.render(
            "approve.html",
            title=f"Approve {approval.tool}?",
            error=error,
            tool=approval.tool,
            approval_id=approval.approval_id,
            rows=self._facts(approval),
            arguments=arguments,
            link=self._hidden(approval, request, cookie),
            max_reason=MAX_REASON_CHARS,
            typed_reason=(request.form.get("reason") or "").replace("\r\n", "\n") if error else "",
            link_edits=self._service.link_edits,
            edited_arguments=edited if edited is not None else arguments,
        )

    def _hidden(self, approval: Approval, request: PageRequest, cookie: str) -> dict[str, str]:
        """What every form of the page posts back: the link's `exp`, `kid` and `sig`, the CSRF
        token."""
        token = self._links().csrf_token(approval.approval_id, cookie)
        return {"exp": request.exp or "", "kid": request.kid or "", "sig": request.sig or "", "csrf": token}

    # --- a question for a person (a human-input tool): the answer is the call's result -----

    def _submit_answer(self, approval: Approval, request: PageRequest) -> PageAnswer:
        """The answer form's POST, through `DeferredCalls.answer_by_link`: the form's strings
        turned into the result schema's types, then checked against it like any answer."""
        if request.form.get("action") != "answer":
            return self._question_again(approval, request, "Not sent: use the form's Send answer button.")
        try:
            value = posted_answer(approval.result_schema, request.form)
            answered = self._service.answer_by_link(approval, request.source_ip, value)
        except InvalidAnswerError as e:
            return self._question_again(approval, request, f"Not sent: {e}")
        except DeliveryFailedError:
            message = "Not sent: the run could not be told; nothing was recorded. Send it again."
            return dataclasses.replace(self._question_again(approval, request, message), status=503)
        except DeliveryUncertainError as e:
            return PageAnswer(503, self._resend_page(self._service.record(approval.approval_id), request, e))
        except ApprovalAlreadyDecidedError as e:
            current = self._service.record(approval.approval_id)
            title = "Already answered" if current.status is ApprovalStatus.ANSWERED else "Not sent"
            return PageAnswer(409, self._answered_page(current, f"{title}: {e}"))
        return PageAnswer(200, self._answered_page(answered, "Answer sent"))

    def _question_again(self, approval: Approval, request: PageRequest, error: str) -> PageAnswer:
        """The question's form again, holding what the person typed, with a one-line error."""
        return PageAnswer(400, self._question_page(approval, request, request.cookie or "", error))

    def _question(self, approval: Approval) -> str:
        """The model's question, whole (the record keeps its first 2,000 characters)."""
        call = self._service.call_of(approval)
        return (approval.question or "") if call is None else question_of(call.arguments, limit=None)

    def _question_page(
        self, approval: Approval, request: PageRequest, cookie: str, error: str | None = None
    ) -> str:
        # What the person typed comes back only with an error: a fresh page starts empty.
        return views.render(
            "question.html",
            title="Question from the agent",
            error=error,
            question=self._question(approval),
            rows=self._facts(approval),
            link=self._hidden(approval, request, cookie),
            inputs=render(approval.result_schema, request.form if error else {}),
        )

    def _answered_page(self, approval: Approval, title: str | None) -> str:
        """A question no longer open: the answer (its first 500 characters), or why none was
        taken; no form (the first answer won)."""
        return views.render(
            "answered.html",
            title=title or f"{approval.status.value.capitalize()}: question from the agent",
            question=self._question(approval),
            rows=self._facts(approval),
            answer=approval.answer_preview,
        )

    def _decided_page(self, approval: Approval, title: str | None) -> str:
        """A decided approval: who decided and when, and no forms (the first decision won)."""
        return views.render(
            "decided.html",
            title=title or f"{approval.status.value.capitalize()}: {approval.tool}",
            rows=self._facts(approval),  # the tool's row names it: once, under the outcome
            arguments=self._arguments(approval),
            edited_arguments=None if approval.arguments is None else _pretty(approval.arguments),
        )


def _pretty(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        return arguments


def error_page(status: int, title: str, message: str) -> PageAnswer:
    """A page that says what went wrong, in one line, with the page's headers."""
    return PageAnswer(status, views.render("error.html", title=title, message=message))


def _invalid() -> PageAnswer:
    return error_page(403, "Link not valid", "This approval link is not valid. Nothing was changed.")


def csrf_cookie(header: str | None) -> str | None:
    """Our cookie's value from the `Cookie` header, read as browsers send it (`a=b; c=d`):
    `SimpleCookie` drops the whole header when any other cookie on the host is one it will not
    parse (`theme=dark mode`, a bare `flag`), which would lock people out of the page. The
    value is checked (`TOKEN_PATTERN`) before any use."""
    for pair in (header or "").split(";"):
        name, sep, value = pair.partition("=")
        if sep and name.strip() == CSRF_COOKIE:
            return value.strip().strip('"')
    return None


def _same_host(origin: str, host: str | None) -> bool:
    """`Origin` names the request's own host (`null`, or another host, does not)."""
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:
        return False
    return bool(host) and netloc.lower() == (host or "").lower()
