"""Creates the local stack's resources on moto, everything a function's configuration names
(shared/src/config.rs; tests/local_stack.rs starts every function's config on what this prints):
the operations table (same keys and indexes as `DynamoStore::create_table` and template.yaml), the
SQS FIFO queue and its dead-letter queue, the events function's inbox table, the outcome bus, the
Stripe key secret and a webhook signing secret made up for this stack.
Prints KEY=VALUE lines for the functions' environment (STRIPE_MAX_NETWORK_RETRIES=0: see below).
With WEBHOOK_SECRET_FILE, writes the signing secret there (mode 600) for whoever signs deliveries
(stripe-sim's webhooks, the walk-through); it is never printed.

    python provision.py ENDPOINT STRIPE_API_BASE [WEBHOOK_SECRET_FILE]
"""

import os
import secrets as random
import string
import sys

import boto3

endpoint, stripe_base = sys.argv[1], sys.argv[2]
session = boto3.session.Session(
    aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
)
ddb = session.client("dynamodb", endpoint_url=endpoint)
sqs = session.client("sqs", endpoint_url=endpoint)
secrets = session.client("secretsmanager", endpoint_url=endpoint)
events = session.client("events", endpoint_url=endpoint)

table = "charge-once-local"
def table_exists(name):
    # Asked by name: ListTables answers 100 names a page, and a stack shared with the tests holds
    # more tables than that.
    try:
        ddb.describe_table(TableName=name)
        return True
    except ddb.exceptions.ResourceNotFoundException:
        return False


if not table_exists(table):
    ddb.create_table(
        TableName=table,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": n, "AttributeType": t}
            for n, t in [
                ("pk", "S"), ("sk", "S"), ("due_shard", "S"), ("due_at", "N"),
                ("settled_on", "S"), ("settled_at", "N"),
            ]
        ],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "unsettled-by-due",
                "KeySchema": [
                    {"AttributeName": "due_shard", "KeyType": "HASH"},
                    {"AttributeName": "due_at", "KeyType": "RANGE"},
                ],
                # As template.yaml: nothing a claim changes is projected (so a claim writes no index
                # entry); status only changes with due_at, so operators see it at no extra index write.
                "Projection": {
                    "ProjectionType": "INCLUDE",
                    "NonKeyAttributes": ["operation_id", "status"],
                },
            },
            {
                # As template.yaml: the drift audit's read of what settled on a day, keys only.
                "IndexName": "settled-by-day",
                "KeySchema": [
                    {"AttributeName": "settled_on", "KeyType": "HASH"},
                    {"AttributeName": "settled_at", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
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
# The events function's inbox of processed Stripe event ids (as template.yaml's WebhookInboxTable
# and `DynamoInbox::create_table`; moto does not expire items, which no local run needs).
inbox_table = "charge-once-local-webhook-inbox"
if not table_exists(inbox_table):
    ddb.create_table(
        TableName=inbox_table,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "event_id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "event_id", "KeyType": "HASH"}],
    )
# Where the notify function publishes outcome events.
bus = "charge-once-local"
if bus not in [b["Name"] for b in events.list_event_buses()["EventBuses"]]:
    events.create_event_bus(Name=bus)


def secret_arn_of(name, value):
    try:
        return secrets.create_secret(Name=name, SecretString=value)["ARN"]
    except secrets.exceptions.ResourceExistsException:
        return secrets.describe_secret(SecretId=name)["ARN"]


secret_arn = secret_arn_of("charge-once/stripe", "sk_test_charge_once")


def made_up_webhook_secret():
    # Stripe's form, as the function requires it (WebhookSecret::parse): whsec_ and 32 letters
    # and digits, at least 10 distinct, no placeholder word. Random: a secret written in this
    # file would be anyone's to sign with.
    alphabet = string.ascii_letters + string.digits
    words = ["placeholder", "example", "changeme", "replace", "dummy", "sample", "your", "xxxx", "secret"]
    while True:
        rest = "".join(random.choice(alphabet) for _ in range(32))
        if len(set(rest.lower())) >= 10 and not any(w in rest.lower() for w in words):
            return "whsec_" + rest


webhook_secret_name = "charge-once/stripe-webhook"
try:
    webhook_secret = secrets.get_secret_value(SecretId=webhook_secret_name)["SecretString"]
    webhook_secret_arn = secrets.describe_secret(SecretId=webhook_secret_name)["ARN"]
except secrets.exceptions.ResourceNotFoundException:
    webhook_secret = made_up_webhook_secret()
    webhook_secret_arn = secret_arn_of(webhook_secret_name, webhook_secret)
if len(sys.argv) > 3:
    fd = os.open(sys.argv[3], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(webhook_secret + "\n")

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
    # The events function: its inbox, and the webhook route's signing secret (EventBridge events
    # need none; no STRIPE_EVENT_SOURCE_NAME, so any Stripe partner source is accepted).
    ("INBOX_TABLE_NAME", inbox_table),
    ("STRIPE_WEBHOOK_SECRET_ARN", webhook_secret_arn),
    # The notify function's bus (its DLQ is DEAD_LETTER_QUEUE_URL above: FIFO here, standard
    # deployed; the adapter tells them apart by the URL).
    ("EVENT_BUS_NAME", bus),
    # No in-call retry locally: a response dropped by stripe-sim's `drop_after_commit` is then
    # recorded `unknown` and settled by the reconciler's re-drive (the walk-through shows it).
    # Deployed, the default (1) retries once within the call with the same key.
    ("STRIPE_MAX_NETWORK_RETRIES", "0"),
]:
    print(f"{key}={value}")
