"""Creates the local stack's resources on moto: the operations table (same keys and indexes as
`DynamoStore::create_table` and template.yaml), the SQS FIFO queue and its dead-letter queue, and
the Stripe key secret.
Prints KEY=VALUE lines for the functions' environment (STRIPE_MAX_NETWORK_RETRIES=0: see below).

    python provision.py ENDPOINT STRIPE_API_BASE
"""

import sys

import boto3

endpoint, stripe_base = sys.argv[1], sys.argv[2]
session = boto3.session.Session(
    aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
)
ddb = session.client("dynamodb", endpoint_url=endpoint)
sqs = session.client("sqs", endpoint_url=endpoint)
secrets = session.client("secretsmanager", endpoint_url=endpoint)

table = "charge-once-local"
if table not in ddb.list_tables()["TableNames"]:
    ddb.create_table(
        TableName=table,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": n, "AttributeType": t}
            for n, t in [("pk", "S"), ("sk", "S"), ("due_shard", "S"), ("due_at", "N")]
        ],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "unsettled-by-due",
                "KeySchema": [
                    {"AttributeName": "due_shard", "KeyType": "HASH"},
                    {"AttributeName": "due_at", "KeyType": "RANGE"},
                ],
                # As template.yaml: nothing a claim changes is projected (issue 15); status only
                # changes with due_at, so operators see it at no extra index write (issue 26).
                "Projection": {
                    "ProjectionType": "INCLUDE",
                    "NonKeyAttributes": ["operation_id", "status"],
                },
            },
        ],
    )
queue_url = sqs.create_queue(
    QueueName="charge-once-local.fifo", Attributes={"FifoQueue": "true", "VisibilityTimeout": "30"}
)["QueueUrl"]
# Where the charge function parks a message no retry can fix (poison), with its reason.
dlq_url = sqs.create_queue(
    QueueName="charge-once-local-dlq.fifo", Attributes={"FifoQueue": "true"}
)["QueueUrl"]
try:
    secret_arn = secrets.create_secret(Name="charge-once/stripe", SecretString="sk_test_charge_once")["ARN"]
except secrets.exceptions.ResourceExistsException:
    secret_arn = secrets.describe_secret(SecretId="charge-once/stripe")["ARN"]

for key, value in [
    ("AWS_ENDPOINT_URL", endpoint),
    ("AWS_ACCESS_KEY_ID", "testing"),
    ("AWS_SECRET_ACCESS_KEY", "testing"),
    ("AWS_REGION", "us-east-1"),
    ("TABLE_NAME", table),
    ("QUEUE_URL", queue_url),
    ("DEAD_LETTER_QUEUE_URL", dlq_url),
    ("STRIPE_API_BASE", stripe_base),
    ("STRIPE_SECRET_ARN", secret_arn),
    # No in-call retry locally: a response dropped by stripe-sim's `drop_after_commit` is then
    # recorded `unknown` and settled by the reconciler's re-drive (the walk-through shows it).
    # Deployed, the default (1) retries once within the call with the same key.
    ("STRIPE_MAX_NETWORK_RETRIES", "0"),
]:
    print(f"{key}={value}")
