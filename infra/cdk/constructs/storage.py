"""Where runs live: the history table, the bucket for large items, the model's API key."""

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from toolpipe.infra.cdk.constructs.model_key import create_empty_secret
from toolpipe.infra.cdk.constructs.nag import AWS_MANAGED_SECRET_KEY, acknowledge, skip_checkov
from toolpipe.shared.dynamo import CALLER_INDEX, CALLER_INDEX_PK, CALLER_INDEX_PROJECTION, CALLER_INDEX_SK
from toolpipe.shared.history.retention import (
    DEFAULT_RETENTION_DAYS,
    MAX_RETENTION_DAYS,
    RETAIN_UNTIL,
    RETENTION_TAG_KEY,
    RETENTION_TAG_VALUE,
    RUN_OBJECTS_PREFIX,
)
from toolpipe.shared.runs.rate_governor import EXPIRES as RATE_EXPIRES
from toolpipe.shared.runs.tool_runner_client import OVERFLOW_PREFIX


def retention_days_of(value: object) -> int:
    """The stack's `retention_days` (CDK context, text from `-c`): days an ended run is kept."""
    if value is None or value == "":
        return DEFAULT_RETENTION_DAYS
    try:
        days = int(str(value))
    except ValueError:
        days = 0
    if not 1 <= days <= MAX_RETENTION_DAYS:
        raise ValueError(
            f"retention_days must be a whole number of days from 1 to {MAX_RETENTION_DAYS}: {value!r}"
        )
    return days


def grant_run_objects(fn: iam.IGrantable, bucket: s3.IBucket, *, delete: bool = False) -> None:
    """What a function that writes runs may do with their objects (`runs/<id>/...`): read and
    write them, list a run's (to tag them for expiry when it ends, and untag them when a resume
    makes it run again) and, for `delete`, remove them (`DELETE /runs/{id}`)."""
    actions = ["s3:GetObject", "s3:PutObject", "s3:PutObjectTagging", "s3:DeleteObjectTagging"] + (
        ["s3:DeleteObject"] if delete else []
    )
    fn.grant_principal.add_to_principal_policy(
        iam.PolicyStatement(actions=actions, resources=[bucket.arn_for_objects(f"{RUN_OBJECTS_PREFIX}*")])
    )
    fn.grant_principal.add_to_principal_policy(
        iam.PolicyStatement(
            actions=["s3:ListBucket"],
            resources=[bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": f"{RUN_OBJECTS_PREFIX}*"}},
        )
    )


class Storage(Construct):
    """The run history (DynamoDB), items too large for it (S3) and the model API key (Secrets
    Manager), unless the key is given or there is none (`create_model_key=False`: `model_key` is
    None). Table and bucket are kept when the stack goes: they hold every run. The table has
    deletion protection on: turn it off before deleting the table (README "Retention").

    An ended run's items expire `retention_days` after its end (the table's TTL on
    `retain_until`), and its objects, tagged when it ends, `retention_days` after they were
    written (a lifecycle rule): shared/history/retention.py."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        create_model_key: bool = True,
        retention_days: int = DEFAULT_RETENTION_DAYS,
    ) -> None:
        super().__init__(scope, construct_id)
        self.retention_days = retention_days
        self.table = dynamodb.Table(
            self,
            "History",
            partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            # One attribute a table: an ended run's items (shared/history/retention.py) and the
            # per-minute quota counters (shared/runs/quota.py) both expire by it.
            time_to_live_attribute=RETAIN_UNTIL,
            # Retained with the stack and protected from a delete by hand: every run lives here.
            deletion_protection=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        skip_checkov(
            self.table,
            "CKV_AWS_119",
            "Encrypted at rest with the AWS-managed key (aws/dynamodb); a customer-managed key (its "
            "policy, rotation, KMS charges per request) is for deployments that need key-level revocation.",
        )
        # `GET /runs`: each caller's runs, newest first (the local runtime makes the same index).
        self.table.add_global_secondary_index(
            index_name=CALLER_INDEX,
            partition_key=dynamodb.Attribute(name=CALLER_INDEX_PK, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=CALLER_INDEX_SK, type=dynamodb.AttributeType.STRING),
            projection_type=dynamodb.ProjectionType.INCLUDE,
            non_key_attributes=list(CALLER_INDEX_PROJECTION),
        )
        self.bucket = s3.Bucket(
            self,
            "Contents",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        # A tool runner's long answer waits here only until the worker reads it back (and deletes
        # it): one a crash left behind expires.
        self.bucket.add_lifecycle_rule(
            id="ToolResultsExpire", prefix=OVERFLOW_PREFIX, expiration=Duration.days(1)
        )
        # An ended run's objects: tagged when it ends, never before (a run that is still going
        # keeps its stored messages however long it takes).
        self.bucket.add_lifecycle_rule(
            id="EndedRunsExpire",
            prefix=RUN_OBJECTS_PREFIX,
            tag_filters={RETENTION_TAG_KEY: RETENTION_TAG_VALUE},
            expiration=Duration.days(retention_days),
        )
        acknowledge(
            self.bucket,
            id="AwsSolutions-S1",
            reason="toolpipe's functions write this bucket; it is read by them and by whoever holds a "
            "presigned GET URL the API hands a run's reader for a large result (15 minutes, signed with the "
            "API function's role). CloudTrail data events on the bucket are the audit path for those reads "
            "(enable them in your trail); access logs would double every tool-output write.",
        )
        skip_checkov(
            self.bucket,
            "CKV_AWS_18",
            "toolpipe's functions write this bucket; it is read by them and by whoever holds a presigned "
            "GET URL the API hands a run's reader for a large result (15 minutes, signed with the API "
            "function's role). CloudTrail data events on the bucket are the audit path for those reads "
            "(enable them in your trail); access logs would double every tool-output write.",
        )
        skip_checkov(
            self.bucket,
            "CKV_AWS_21",
            "Each object is written once under a key made per run and item (runs/<run>/...), never "
            "rewritten with other content, and the bucket is retained with the stack. Versions would guard "
            "against deletes only, and need a lifecycle rule for the noncurrent ones.",
        )
        # The model's rate budgets (shared/runs/rate_governor.py): one item per endpoint and model,
        # one per run waiting; only the orchestrator reads or writes it. Nothing in it outlives a
        # day (its time to live), so it goes with the stack.
        self.rate_table = dynamodb.Table(
            self,
            "ModelRateBudget",
            partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            time_to_live_attribute=RATE_EXPIRES,
            removal_policy=RemovalPolicy.DESTROY,
        )
        skip_checkov(
            self.rate_table,
            "CKV_AWS_119",
            "Encrypted at rest with the AWS-managed key (aws/dynamodb): it holds times and run ids, no "
            "content.",
        )
        self.model_key: secretsmanager.Secret | None = None
        if create_model_key:
            # Empty: each run says how to set it until it is (infra/cdk/constructs/model_key.py).
            self.model_key = create_empty_secret(self, "ModelApiKey")
            acknowledge(
                self.model_key,
                id="AwsSolutions-SMG4",
                reason="A third-party API key: it is rotated at the model provider, not by a Lambda here.",
            )
            skip_checkov(
                self.model_key,
                "CKV_AWS_149",
                AWS_MANAGED_SECRET_KEY + " Give a secret of yours (model_key_secret_arn) to use your key "
                "(model_key_kms_key_arn).",
            )
