"""Prints the last lines each of the stack's functions logged in the emulator (CloudWatch Logs),
for a failed run: logs.py STATE_JSON [LINES]."""

import json
import sys

import boto3

state = json.load(open(sys.argv[1]))
lines = int(sys.argv[2]) if len(sys.argv) > 2 else 30
logs = boto3.client("logs", endpoint_url=state["endpoint"], region_name=state["region"],
                    aws_access_key_id="test", aws_secret_access_key="test")
for group in logs.describe_log_groups(logGroupNamePrefix=f"/charge-once/{state['stack']}/")["logGroups"]:
    name = group["logGroupName"]
    events = []
    for stream in logs.describe_log_streams(logGroupName=name)["logStreams"]:
        events += logs.get_log_events(logGroupName=name, logStreamName=stream["logStreamName"])["events"]
    events.sort(key=lambda e: e["timestamp"])
    print(f"== {name}: the last {min(lines, len(events))} of {len(events)} lines")
    for e in events[-lines:]:
        print(e["message"].rstrip()[:2000])
