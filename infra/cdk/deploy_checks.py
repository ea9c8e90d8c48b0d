"""`make check-deploy`: the checks AWS applies when it creates the stack that can run offline,
on the synthesized template (`TOOLPIPE_BUNDLE=0`, as `make synth`).

One line per check, then a one-line reason and a non-zero exit on any failure:

- `cdk-nag`: synthesis itself; an unacknowledged finding fails it (infra/cdk/app.py).
- `asl-rules`: what Step Functions refuses and asl-validator misses, or reports without naming
  the state (infra/cdk/asl_rules.py).
- `aws-limits`: the limits AWS applies to values as they resolve at deploy time (Lambda's 4 KB
  environment, 5 layers and 250 MB; IAM policy sizes; a heartbeat shorter than its timeout),
  references filled in with the longest values deploy time could give (infra/cdk/aws_limits.py).
- `asl-validator` (npm): every state machine's definition, rendered as AWS will see it.
- `cfn-lint` (pip): no errors against the CloudFormation resource specification; warnings pass.
- `checkov` (pip, its own venv): no failed check; each skip is stated, with its reason, on the
  resource it concerns (infra/cdk/constructs/nag.py `skip_checkov`).

`python -m toolpipe.infra.cdk.deploy_checks [--template FILE] [--checks a,b]`: with `--template`, the
file is checked and nothing is synthesized (so no cdk-nag).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolpipe.infra.cdk import asl_rules, aws_limits
from toolpipe.infra.cdk.intrinsics import IntrinsicError, Resolver

ROOT = Path(__file__).resolve().parents[2]
NODE_BIN = ROOT / "node_modules" / ".bin"
# Its own venv: checkov 3.3 pins boto3==1.35.49 and packaging<24, below what the dev venv runs.
CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"
STATE_MACHINE = "AWS::StepFunctions::StateMachine"

# Stand-ins for what CloudFormation resolves at deploy time: well-formed, so the validator
# checks a `Resource` ARN or a `QueueUrl` as it would check the real one.
REGION, ACCOUNT, PARTITION = "us-east-1", "123456789012", "aws"
STACK_NAME = "Toolpipe"


@dataclass(frozen=True)
class Result:
    """One check: its name, whether it passed, and a short figure (or the reason it failed)."""

    name: str
    ok: bool
    figure: str

    def line(self) -> str:
        return f"{self.name:<14} {'pass' if self.ok else 'FAIL'}  {self.figure}"


class TemplateError(ValueError):
    """The template holds something the checks cannot render (an intrinsic they do not know)."""


def definitions(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every state machine's definition by logical id, as Step Functions will read it: the
    `DefinitionString` joined, `${...}` substitutions and `Ref`/`Fn::GetAtt` parts replaced by
    well-formed stand-ins."""
    resources: dict[str, Any] = template.get("Resources", {})
    found = {}
    for logical_id, resource in resources.items():
        if resource.get("Type") != STATE_MACHINE:
            continue
        props = resource.get("Properties", {})
        if "Definition" in props:  # an object, not a string: nothing to join
            text = json.dumps(props["Definition"])
        else:
            text = _render(props.get("DefinitionString", ""), resources)
        for name, value in (props.get("DefinitionSubstitutions") or {}).items():
            text = text.replace("${" + name + "}", _render(value, resources))
        try:
            found[logical_id] = json.loads(text)
        except json.JSONDecodeError as e:
            raise TemplateError(f"{logical_id}: the definition is not JSON ({e})") from e
    return found


def _render(value: Any, resources: dict[str, Any]) -> str:
    """A definition's text, every reference in it replaced by its stand-in."""
    refs = {logical_id: _ref(logical_id, resources) for logical_id in resources}
    attributes = {
        (logical_id, attribute): _get_att(logical_id, attribute, resources)
        for logical_id in resources
        for attribute in ("Arn", "QueueUrl", "Name")
    }
    resolver = Resolver(refs, attributes, region=REGION, account=ACCOUNT, stack_name=STACK_NAME)
    try:
        return str(resolver.resolve(value))
    except IntrinsicError as e:
        raise TemplateError(f"{e} in a state machine definition") from e


def _type(logical_id: str, resources: dict[str, Any]) -> str:
    if logical_id not in resources:
        raise TemplateError(f"{logical_id} is not a resource of the template")
    return str(resources[logical_id].get("Type", ""))


def _ref(logical_id: str, resources: dict[str, Any]) -> str:
    kind = _type(logical_id, resources)
    if kind == "AWS::SQS::Queue":
        return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{logical_id}"
    if kind in ("AWS::SNS::Topic", STATE_MACHINE, "AWS::StepFunctions::Activity"):
        return _arn(kind, logical_id)
    return logical_id.lower() if kind == "AWS::S3::Bucket" else logical_id  # a name


def _get_att(logical_id: str, attribute: str, resources: dict[str, Any]) -> str:
    kind = _type(logical_id, resources)
    if attribute == "Arn":
        return _arn(kind, logical_id)
    if attribute == "QueueUrl":
        return _ref(logical_id, resources)
    return logical_id


def _arn(kind: str, logical_id: str) -> str:
    service = kind.split("::")[1].lower()
    resource = {
        "AWS::Lambda::Function": f"function:{logical_id}",
        STATE_MACHINE: f"stateMachine:{logical_id}",
        "AWS::StepFunctions::Activity": f"activity:{logical_id}",
        "AWS::DynamoDB::Table": f"table/{logical_id}",
        "AWS::Events::EventBus": f"event-bus/{logical_id}",
    }.get(kind, logical_id)
    if kind == "AWS::S3::Bucket":
        return f"arn:{PARTITION}:s3:::{logical_id.lower()}"
    return (
        f"arn:{PARTITION}:{'states' if service == 'stepfunctions' else service}:{REGION}:{ACCOUNT}:{resource}"
    )


def check_asl_rules(template: Path, workdir: Path) -> Result:
    machines = definitions(_load(template))
    found = [f"{p} ({logical_id})" for logical_id, d in machines.items() for p in asl_rules.problems(d)]
    if found:
        more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
        return Result("asl-rules", False, found[0] + more)
    states = sum(len(s.states) for d in machines.values() for s in asl_rules.scopes(d))
    return Result("asl-rules", True, f"{len(machines)} state machine(s), {states} states")


def check_aws_limits(template: Path, workdir: Path) -> Result:
    # CDK names the file after the stack (`<stack>.template.json`): its generated names grow with it.
    name = template.name.removesuffix(".template.json") if template.name.endswith(".template.json") else ""
    found = aws_limits.breaches(_load(template), stack_name=name or STACK_NAME, assets=template.parent)
    if found:
        more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
        return Result("aws-limits", False, found[0].line() + more)
    return Result("aws-limits", True, "environments, layers, policy sizes and heartbeats within AWS's limits")


def check_asl_validator(template: Path, workdir: Path) -> Result:
    machines = definitions(_load(template))
    if not machines:
        return Result("asl-validator", True, "no state machine")
    command = [_npm_bin("asl-validator")]
    for logical_id, definition in machines.items():
        path = workdir / f"{logical_id}.asl.json"
        path.write_text(json.dumps(definition, indent=1))
        command += ["--json-path", str(path)]
    done = _run(command)
    if done.returncode != 0:
        # Its report: `✕ State machine definition "<file>" is invalid:`, then one line per error.
        errors = [line.strip() for line in done.stderr.splitlines() if re.match(r"\s*[A-Z_]+: ", line)]
        invalid = re.findall(r'"([^"]+)\.asl\.json" is invalid', done.stderr)
        where = f" ({Path(invalid[0]).name})" if invalid else ""
        return Result("asl-validator", False, (errors[0] if errors else _last_line(done)) + where)
    return Result("asl-validator", True, f"{len(machines)} definition(s) valid")


def check_cfn_lint(template: Path, workdir: Path) -> Result:
    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    done = _run([str(cfn_lint) if cfn_lint.exists() else "cfn-lint", "--format", "json", str(template)])
    try:
        findings: list[dict[str, Any]] = json.loads(done.stdout or "[]")
    except json.JSONDecodeError:
        return Result("cfn-lint", False, _last_line(done))
    errors = [
        f"{f['Rule']['Id']} at {'/'.join(map(str, f['Location']['Path']))}: {f['Message']}"
        for f in findings
        if f.get("Level") == "Error"
    ]
    warnings = sum(1 for f in findings if f.get("Level") == "Warning")
    # The exit code is a bit mask (2: an error, 4: a warning, 8: an informational finding).
    if errors or done.returncode & 2 or done.returncode & ~14:
        return Result(
            "cfn-lint", False, f"{len(errors)} error(s): {errors[0] if errors else _last_line(done)}"
        )
    return Result("cfn-lint", True, f"0 errors, {warnings} warnings")


def check_checkov(template: Path, workdir: Path) -> Result:
    checkov = CHECKOV if CHECKOV.exists() else shutil.which("checkov")
    if checkov is None:
        return Result(
            "checkov", False, f"not installed: `make check-deploy` installs it in {CHECKOV.parent.parent}"
        )
    # --skip-download and no update check: nothing leaves the machine.
    env = {**os.environ, "CKV_SKIP_PACKAGE_UPDATE_CHECK": "true"}
    command = [str(checkov), "-f", str(template), "--framework", "cloudformation", "--skip-download"]
    done = _run([*command, "--quiet", "--compact", "-o", "json"], env=env)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        return Result("checkov", False, _last_line(done))
    reports = report if isinstance(report, list) else [report]
    failed = [c for r in reports for c in r.get("results", {}).get("failed_checks", [])]
    summary = {k: sum(r.get("summary", {}).get(k, 0) for r in reports) for k in ("passed", "skipped")}
    if failed:
        first = failed[0]
        return Result(
            "checkov",
            False,
            f"{len(failed)} failed: {first['check_id']} on {first['resource']} ({first['check_name']})",
        )
    return Result(
        "checkov", True, f"{summary['passed']} passed, {summary['skipped']} skipped (reasons in code)"
    )


def checkov_skips(template: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    """Every checkov check the template skips: by check id, each reason given and the logical ids
    of the resources it is given for (`skip_checkov` writes them into the resources' metadata).
    README "What the stack holds" lists the checks; a test holds the list to this."""
    skips: dict[str, dict[str, list[str]]] = {}
    for logical_id, resource in sorted(template.get("Resources", {}).items()):
        for skip in (resource.get("Metadata") or {}).get("checkov", {}).get("skip", []):
            skips.setdefault(skip["id"], {}).setdefault(skip["comment"], []).append(logical_id)
    return dict(sorted(skips.items()))


CHECKS: dict[str, Callable[[Path, Path], Result]] = {
    "asl-rules": check_asl_rules,
    "aws-limits": check_aws_limits,
    "asl-validator": check_asl_validator,
    "cfn-lint": check_cfn_lint,
    "checkov": check_checkov,
}


def synthesize(outdir: Path) -> tuple[Result, Path | None]:
    """The app synthesized offline, cdk-nag included: its result, and the template's path."""
    from toolpipe.infra.cdk.app import build_app  # imports aws_cdk (and starts node): only here

    try:
        # With cdk.json's context, as `make synth` (`cdk synth`) reads it: the stack it deploys,
        # the example's "mail" runner included, so each check covers a named runner's function too.
        context = json.loads((ROOT / "cdk.json").read_text())["context"]
        app, stack = build_app(bundle=False, outdir=str(outdir), context=context)
        assembly = app.synth()
    except RuntimeError as e:  # jsii raises cdk-nag's ValidationFailed as a RuntimeError
        return Result("cdk-nag", False, _nag_reason(outdir / "validation-report.json", str(e))), None
    path = outdir / assembly.get_stack_by_name(stack.stack_name).template_file
    return Result("cdk-nag", True, "0 unacknowledged findings"), path


def _nag_reason(report: Path, message: str) -> str:
    """The first finding of the validation report CDK writes beside the assembly."""
    if not report.exists():
        lines = message.strip().splitlines()
        return lines[0][:200] if lines else "synthesis failed"
    violations = [
        (v["ruleName"], c["constructPath"])
        for plugin in json.loads(report.read_text()).get("pluginReports", [])
        for v in plugin.get("violations", [])
        for c in v.get("violatingConstructs", [])
    ]
    if not violations:
        return message.strip().splitlines()[0][:200]
    rule, path = violations[0]
    return f"{len(violations)} unacknowledged finding(s): {rule} at {path}"


def run(template: Path | None, names: Sequence[str], echo: Callable[[str], None] = print) -> list[Result]:
    """Synthesizes (when `template` is None), then runs the named checks, echoing each line."""
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="check-deploy-") as tmp:
        workdir = Path(tmp)
        if template is None:
            started = time.monotonic()
            nag, template = synthesize(workdir / "cdk.out")
            nag = Result(nag.name, nag.ok, f"{nag.figure} ({time.monotonic() - started:.0f} s to synthesize)")
            results.append(nag)
            echo(nag.line())
            if template is None:
                return results
        # Side by side: each check is mostly a subprocess (node, cfn-lint, checkov) waiting on its own.
        with ThreadPoolExecutor(max_workers=len(names) or 1) as pool:
            running = [pool.submit(_check, name, template, workdir) for name in names]
            for future in running:
                results.append(future.result())
                echo(results[-1].line())
    return results


def _check(name: str, template: Path, workdir: Path) -> Result:
    try:
        return CHECKS[name](template, workdir)
    except TemplateError as e:
        return Result(name, False, str(e))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toolpipe.infra.cdk.deploy_checks", description=__doc__)
    parser.add_argument("--template", type=Path, help="check this template; do not synthesize")
    parser.add_argument("--checks", default=",".join(CHECKS), help=f"comma-separated, of {', '.join(CHECKS)}")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.checks.split(",") if n.strip()]
    if unknown := [n for n in names if n not in CHECKS]:
        parser.error(f"unknown check(s): {', '.join(unknown)}")
    started = time.monotonic()
    results = run(args.template, names)
    failed = [r for r in results if not r.ok]
    if failed:
        print(f"check-deploy: {failed[0].name} failed: {failed[0].figure}", file=sys.stderr)
        return 1
    print(f"check-deploy: {len(results)} checks passed in {time.monotonic() - started:.0f} s")
    return 0


def _load(template: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(template.read_text())
    return loaded


def _npm_bin(name: str) -> str:
    local = NODE_BIN / name
    return str(local) if local.exists() else name


def _run(command: list[str], env: dict[str, str] | None = None) -> "subprocess.CompletedProcess[str]":
    # node_modules/.bin first: `#!/usr/bin/env node` then finds package.json's Node.
    env = dict(os.environ if env is None else env)
    env["PATH"] = f"{NODE_BIN}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, check=False)


def _last_line(done: "subprocess.CompletedProcess[str]") -> str:
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[-1][:200] if lines else f"exit code {done.returncode}"


if __name__ == "__main__":
    sys.exit(main())
