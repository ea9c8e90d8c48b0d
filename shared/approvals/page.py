"""The approval page a person opens from the signed link: GET shows the call, POST decides.

Server-rendered HTML with no script. GET (and HEAD) never change state: mail scanners and link
previews open links. A POST needs the link's signature, the CSRF cookie the GET set and the
token derived from it in the form, and no foreign `Origin`; the decision then goes through
`ApprovalService` like any other (first decision wins, one answer to the waiting task).
Every value shown is HTML-escaped.
"""

import base64
import dataclasses
import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from html import escape
from urllib.parse import urlsplit

from toolpipe.shared.approvals.answer_form import posted_answer, render
from toolpipe.shared.approvals.answers import question_of
from toolpipe.shared.approvals.links import (
    TOKEN_PATTERN,
    ApprovalLinks,
    LinkExpiredError,
    LinkInvalidError,
    SigningKeyError,
)
from toolpipe.shared.approvals.models import (
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
from toolpipe.shared.approvals.service import ApprovalService

logger = logging.getLogger(__name__)

CSRF_COOKIE = "toolpipe_csrf"
# The run's request as the page shows it: enough to recognise it, not a whole document.
INPUT_CHARS = 2_000
_ID = re.compile(APPROVAL_ID_PATTERN)

_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem;color:#1b1b1b}"
    "pre,textarea{font-family:ui-monospace,monospace;font-size:.9rem}"
    "pre{background:#f4f4f4;padding:.75rem;overflow:auto;white-space:pre-wrap;word-break:break-word}"
    "textarea{width:100%;box-sizing:border-box}"
    "form{margin:1rem 0;padding:1rem;border:1px solid #ccc;border-radius:.4rem}"
    "button{font-size:1rem;padding:.4rem 1rem;margin-top:.5rem}"
    "dt{font-weight:600}dd{margin:0 0 .5rem 0;white-space:pre-wrap;word-break:break-word}"
    ".error{color:#a00000}"
)
_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
# No script at all; forms post only back here; no framing (clickjacking); nothing else loads.
CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Cache-Control": "no-store",
    # The URL carries the signature: never send it on to another site. Not `no-referrer`:
    # under it Chromium sends the page's own form POST with `Origin: null`, which is refused.
    "Referrer-Policy": "same-origin",
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}


@dataclass(frozen=True)
class PageAnswer:
    status: int
    html: str
    # A CSRF cookie value to set (the GET of a browser that has none yet).
    set_cookie: str | None = None
    headers: Mapping[str, str] = field(default_factory=lambda: dict(HEADERS))


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
    def __init__(self, service: ApprovalService, clock: Callable[[], float] = time.time) -> None:
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
            return _error(403, "Refused", "This form was sent from another site.")
        checked = self._checked(request)
        if isinstance(checked, PageAnswer):
            return checked
        approval = checked
        links = self._links()
        if not links.check_csrf(approval.approval_id, request.cookie, request.form.get("csrf")):
            return _error(
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
            return _error(404, "Not available", "Approval links are not enabled here.")
        if not _ID.fullmatch(request.approval_id):
            return _invalid()
        try:
            approval = self._service.record(request.approval_id)
            links.check(approval, request.exp, request.sig, self._clock(), request.kid)
        except (ApprovalNotFoundError, LinkInvalidError):
            return _invalid()
        except SigningKeyError as e:
            logger.error("approval page unavailable: %s", e)
            return _error(
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
            return _error(410, "Link expired", f"{str(e)[0].upper()}{str(e)[1:]}.")
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
        same = "".join(
            f'<input type="hidden" name="{escape(name)}" value="{escape(value)}">'
            for name, value in request.form.items()
            if name not in ("exp", "kid", "sig", "csrf")
        )
        heading = f"Recorded {error.status.value}; delivery uncertain"
        body = (
            f"<h1>{escape(heading)}</h1><p>This is recorded, but whether the run heard it is "
            "uncertain. Sending the same again delivers it (once).</p>"
            + f'<form method="post">{self._hidden(approval, request, request.cookie or "")}{same}'
            '<button type="submit">Send the same again</button></form>' + self._facts(approval)
        )
        return _document(heading, body)

    def _facts(self, approval: Approval) -> str:
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
        return "<dl>" + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in rows) + "</dl>"

    def _arguments(self, approval: Approval) -> str:
        call = self._service.call_of(approval)
        return _pretty(call.arguments if call is not None else approval.arguments_preview)

    def _form_page(
        self, approval: Approval, request: PageRequest, cookie: str, error: str | None = None
    ) -> str:
        arguments = self._arguments(approval)
        # After an error the forms keep what the person typed: nothing they wrote is lost.
        edited = request.form.get("arguments") if error and request.form.get("action") == "edit" else None
        typed = (request.form.get("reason") or "").replace("\r\n", "\n") if error else ""
        hidden = self._hidden(approval, request, cookie)
        heading = (
            f'<h1 class="error">{escape(error)}</h1><p>Tool <code>{escape(approval.tool)}</code>: nothing was decided.</p>'
            if error
            else f"<h1>Approve <code>{escape(approval.tool)}</code>?</h1>"
        )
        if self._service.link_edits:
            editor = (
                f'<form method="post">{hidden}<input type="hidden" name="action" value="edit">'
                '<label for="arguments">Arguments (JSON)</label>'
                f'<textarea id="arguments" name="arguments" rows="12">{escape(edited if edited is not None else arguments)}</textarea>'
                '<button type="submit">Approve with these arguments</button></form>'
            )
        else:
            # A link is not a person: whoever holds it (a forwarded mail, a shared inbox) may
            # approve or deny what the model asked, never change it (README "The approval link").
            editor = (
                "<p>To run it with other arguments, an authenticated approver uses "
                f"<code>toolpipe approve {escape(approval.approval_id)} --arguments '{{…}}'</code> "
                "(or the API's <code>POST /approvals/{id}/approve</code>): this link approves or "
                "denies the arguments above as they are.</p>"
            )
        body = (
            heading
            + self._facts(approval)
            + f"<h2>Arguments</h2><pre>{escape(arguments)}</pre>"
            + f'<form method="post">{hidden}<input type="hidden" name="action" value="approve">'
            '<button type="submit">Approve</button></form>'
            + f'<form method="post">{hidden}<input type="hidden" name="action" value="deny">'
            f'<label for="reason">Reason</label><textarea id="reason" name="reason" rows="3" '
            f'maxlength="{MAX_REASON_CHARS}" required>{escape(typed)}</textarea>'
            '<button type="submit">Deny</button></form>' + editor
        )
        return _document(f"Approve {approval.tool}?", body)

    def _hidden(self, approval: Approval, request: PageRequest, cookie: str) -> str:
        """What every form of the page posts back: the link's `exp`, `kid` and `sig`, the CSRF
        token."""
        token = self._links().csrf_token(approval.approval_id, cookie)
        return (
            f'<input type="hidden" name="exp" value="{escape(request.exp or "")}">'
            f'<input type="hidden" name="kid" value="{escape(request.kid or "")}">'
            f'<input type="hidden" name="sig" value="{escape(request.sig or "")}">'
            f'<input type="hidden" name="csrf" value="{escape(token)}">'
        )

    # --- a question for a person (a human-input tool): the answer is the call's result -----

    def _submit_answer(self, approval: Approval, request: PageRequest) -> PageAnswer:
        """The answer form's POST, through `ApprovalService.answer_by_link`: the form's strings
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
        typed = request.form if error else {}
        heading = (
            f'<h1 class="error">{escape(error)}</h1><p>Your answer was not sent: correct it below.</p>'
            if error
            else "<h1>Question from the agent</h1>"
        )
        body = (
            heading
            + f"<pre>{escape(self._question(approval))}</pre>"
            + self._facts(approval)
            + f'<form method="post">{self._hidden(approval, request, cookie)}'
            '<input type="hidden" name="action" value="answer">'
            + render(approval.result_schema, typed)
            + '<button type="submit">Send answer</button></form>'
        )
        return _document("Question from the agent", body)

    def _answered_page(self, approval: Approval, title: str | None) -> str:
        """A question no longer open: the answer (its first 500 characters), or why none was
        taken; no form (the first answer won)."""
        heading = title or f"{approval.status.value.capitalize()}: question from the agent"
        body = f"<h1>{escape(heading)}</h1><pre>{escape(self._question(approval))}</pre>"
        body += self._facts(approval)
        if approval.answer_preview is not None:
            body += f"<h2>The answer</h2><pre>{escape(approval.answer_preview)}</pre>"
        return _document(heading, body)

    def _decided_page(self, approval: Approval, title: str | None) -> str:
        """A decided approval: who decided and when, and no forms (the first decision won)."""
        heading = title or f"{approval.status.value.capitalize()}: {approval.tool}"
        body = f"<h1>{escape(heading)}</h1>" + f"<p>Tool <code>{escape(approval.tool)}</code></p>"
        body += self._facts(approval)
        body += f"<h2>Arguments</h2><pre>{escape(self._arguments(approval))}</pre>"
        if approval.arguments is not None:
            body += f"<h2>Arguments approved (edited)</h2><pre>{escape(_pretty(approval.arguments))}</pre>"
        return _document(heading, body)


def _pretty(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        return arguments


def _document(title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="same-origin">'
        f"<title>{escape(title)} · toolpipe</title><style>{_STYLE}</style></head>"
        f"<body><main>{body}</main></body></html>"
    )


def error_page(status: int, title: str, message: str) -> PageAnswer:
    """A page that says what went wrong, in one line, with the page's headers."""
    return _error(status, title, message)


def _error(status: int, title: str, message: str) -> PageAnswer:
    return PageAnswer(status, _document(title, f"<h1>{escape(title)}</h1><p>{escape(message)}</p>"))


def _invalid() -> PageAnswer:
    return _error(403, "Link not valid", "This approval link is not valid. Nothing was changed.")


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
