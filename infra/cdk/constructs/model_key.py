"""Where the orchestrator's model API key comes from: a secret of yours, one the stack creates
empty, or none at all (an endpoint that takes no key).

- `-c model_key_secret_arn=arn:aws:secretsmanager:…:secret:name-AbCdEf` (or
  `ToolPipeline(model_key_secret=...)` with the ARN or an `ISecret`): the orchestrator reads that
  secret; its role may `GetSecretValue` on exactly that ARN, and nothing is created. A secret
  encrypted with a customer-managed KMS key also needs `-c model_key_kms_key_arn=arn:aws:kms:…`
  (or an `ISecret` imported with its `encryption_key`): the role may then `kms:Decrypt` with that
  key, through Secrets Manager only.
- nothing: the stack creates the `ModelApiKey` secret with no value. Every run fails at its first
  model call with the `put-secret-value` command for it, until a value is put; then the next run
  works, with no redeploy (`shared/model/api_key.py`).
- `none`: no key and no secret, for a self-hosted endpoint that checks none (`model_base_url`
  must then be set: the default endpoint, OpenAI's, always wants one).
"""

import re

from aws_cdk import Arn, ArnFormat, RemovalPolicy, Token
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

NO_MODEL_KEY = "none"
# A complete secret ARN ends with the six characters Secrets Manager adds to the name: IAM
# matches the resource exactly, so a partial ARN (without them) would grant nothing.
_SECRET_ARN = re.compile(r"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[\w/+=.@-]+-[A-Za-z0-9]{6}")
_KMS_KEY_ARN = re.compile(r"arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]+")

ModelKeySecret = str | secretsmanager.ISecret | None


def resolve_model_key(
    scope: Construct,
    given: ModelKeySecret,
    *,
    kms_key_arn: str | None = None,
    model_base_url: str = "",
) -> secretsmanager.ISecret | None:
    """The secret the key is read from, imported from what was given; None when there is none
    to read (`none`) or one is to be created (`given` is None: the caller creates it).

    Raises:
        ValueError: a value that cannot work, in one line naming the setting.
    """
    if kms_key_arn is not None and not isinstance(given, str):
        raise ValueError("model_key_kms_key_arn goes with model_key_secret_arn (the secret it encrypts)")
    if given is None or not isinstance(given, str):
        return given
    if given == NO_MODEL_KEY:
        if not model_base_url:
            raise ValueError(
                "model_key_secret_arn=none needs model_base_url: only a server of your own may take no key"
            )
        return None
    if not Token.is_unresolved(given) and not _SECRET_ARN.fullmatch(given):
        raise ValueError(
            f"model_key_secret_arn must be a secret's complete ARN (arn:aws:secretsmanager:REGION:ACCOUNT:"
            f"secret:NAME-XXXXXX, as `aws secretsmanager describe-secret` prints it) or 'none', not {given!r}"
        )
    if (
        kms_key_arn is not None
        and not Token.is_unresolved(kms_key_arn)
        and not _KMS_KEY_ARN.fullmatch(kms_key_arn)
    ):
        raise ValueError(
            f"model_key_kms_key_arn must be a KMS key ARN (arn:aws:kms:…:key/ID), not {kms_key_arn!r}"
        )
    return secretsmanager.Secret.from_secret_complete_arn(scope, "ModelApiKey", given)


def grant_decrypt(grantee: iam.IGrantable, kms_key_arn: str, secret_arn: str) -> None:
    """`kms:Decrypt` with the key that encrypts the secret, only as Secrets Manager uses it.

    Written out rather than through an imported key's `grant_decrypt`: with the stack's account
    unknown at synth (no `env`), CDK treats an imported key as another account's and grants
    nothing in the role's policy (seen: no kms statement in the template).
    """
    region = Arn.split(secret_arn, ArnFormat.COLON_RESOURCE_NAME).region
    grantee.grant_principal.add_to_principal_policy(
        iam.PolicyStatement(
            actions=["kms:Decrypt"],
            resources=[kms_key_arn],
            conditions={"StringEquals": {"kms:ViaService": f"secretsmanager.{region}.amazonaws.com"}},
        )
    )


def create_empty_secret(scope: Construct, construct_id: str) -> secretsmanager.Secret:
    """A secret with no value: Secrets Manager's "empty secret" (neither `SecretString` nor
    `GenerateSecretString`). A generated value would be a random key that the provider answers
    with a 401; no value is what the orchestrator recognises and explains."""
    secret = secretsmanager.Secret(
        scope,
        construct_id,
        description="API key of the OpenAI-compatible model endpoint: put its value after deploying "
        "(aws secretsmanager put-secret-value --secret-id ARN --secret-string KEY).",
        # Kept when the stack is deleted or the secret replaced, as the table and bucket are: it
        # holds a key the deployer put, which nothing here could make again (CDK's default for a
        # Secret is to delete it).
        removal_policy=RemovalPolicy.RETAIN,
    )
    # CDK's Secret always asks CloudFormation to generate a value when none is given.
    resource = secret.node.default_child
    assert isinstance(resource, secretsmanager.CfnSecret)
    resource.add_property_deletion_override("GenerateSecretString")
    return secret
