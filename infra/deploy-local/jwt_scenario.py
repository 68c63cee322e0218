"""CheckoutAuth=JWT on the emulator: a second stack of the same template whose routes take a
bearer token, issued here by the emulator's Cognito (the one issuer whose keys it serves over
plain HTTP; JwtIssuer must be https://). Every step asserted:

- a token from the order service's app client, with the stack's scope: 202, and the charge made
  once at stripe-sim; GET with the same token: succeeded;
- no token: 401; a token of a client that is not in JwtAudience: 401; a token of an audience
  client without the scope: 403 (API Gateway's answers, before the function).

    jwt_scenario.py STATE_JSON ZIP_DIR

STATE_JSON is the first stack's (deploy.py's), for the endpoint and stripe-sim; this deploys the
second stack with deploy.py and writes its state beside it.
"""

import base64
import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

import boto3

import scenario
from scenario import begin, check, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    state_path, zip_dir = sys.argv[1], sys.argv[2]
    with open(state_path) as f:
        first = json.load(f)
    ep = first["endpoint"]
    kw = dict(endpoint_url=ep, region_name=first["region"], aws_access_key_id="test", aws_secret_access_key="test")
    idp = boto3.client("cognito-idp", **kw)

    begin("an issuer: a Cognito user pool, its resource server and scope, two app clients")
    pool = idp.create_user_pool(PoolName="charge-once-order-services")["UserPool"]["Id"]
    idp.create_resource_server(UserPoolId=pool, Identifier="charge-once", Name="charge-once",
                               Scopes=[{"ScopeName": "charges:write", "ScopeDescription": "create charges"},
                                       {"ScopeName": "refunds:write", "ScopeDescription": "refund, capture, cancel"},
                                       {"ScopeName": "charges:read", "ScopeDescription": "read only"}])

    def app_client(name, scopes):
        c = idp.create_user_pool_client(UserPoolId=pool, ClientName=name, GenerateSecret=True,
                                        AllowedOAuthFlows=["client_credentials"], AllowedOAuthFlowsUserPoolClient=True,
                                        AllowedOAuthScopes=scopes)["UserPoolClient"]
        return c["ClientId"], c["ClientSecret"]

    order_service = app_client("order-service", ["charge-once/charges:write", "charge-once/refunds:write"])
    charger = app_client("charger", ["charge-once/charges:write"])
    reader = app_client("reader", ["charge-once/charges:read"])
    outsider = app_client("outsider", ["charge-once/charges:write"])
    issuer = f"https://cognito-idp.{first['region']}.amazonaws.com/{pool}"
    check(True, f"issuer {issuer}")

    begin("deploy the template again as a second stack, CheckoutAuth=JWT")
    second = os.path.join(os.path.dirname(state_path), "state-jwt.json")
    subprocess.run([sys.executable, os.path.join(HERE, "deploy.py"), ep, first["stripe_url"], zip_dir, second,
                    "--stack", "charge-once-jwt",
                    "--param", "CheckoutAuth=JWT", "--param", f"JwtIssuer={issuer}",
                    "--param", f"JwtAudience={order_service[0]},{reader[0]},{charger[0]}",
                    "--param", "JwtScope=charge-once/charges:write",
                    "--param", "JwtRefundScope=charge-once/refunds:write",
                    "--param", "StripeEventSourceName=", "--param", "StripeWebhookSecretArn=",
                    "--param", "Stage=jwt"], check=True)
    with open(second) as f:
        state = json.load(f)

    begin("the Rules block, evaluated: CheckoutAuth=JWT without an audience is refused as a whole")
    cfn = boto3.client("cloudformation", **kw)
    params = {**state["parameters"], "JwtAudience": ""}
    try:
        cfn.create_stack(StackName="charge-once-no-audience", TemplateURL=state["template_url"],
                         Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()],
                         Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"])
        refused = ""
    except cfn.exceptions.ClientError as e:
        refused = str(e)
    check("CheckoutAuth=JWT needs JwtAudience" in refused, f"refused by the rule: {refused[:200]}")
    check(not any(s["StackName"] == "charge-once-no-audience" for s in cfn.list_stacks()["StackSummaries"]),
          "no stack was created")
    api = state["outputs"]["ApiUrl"].split("//", 1)[1].split(".", 1)[0]

    def token(client):
        cid, secret = client
        auth = base64.b64encode(f"{cid}:{secret}".encode()).decode()
        r = urllib.request.Request(f"{ep}/oauth2/token", method="POST",
                                   data=urllib.parse.urlencode({"grant_type": "client_credentials"}).encode(),
                                   headers={"authorization": f"Basic {auth}",
                                            "content-type": "application/x-www-form-urlencoded"})
        with urllib.request.urlopen(r, timeout=10) as resp:
            return json.loads(resp.read())["access_token"]

    def call(method, path, bearer=None, body=None):
        headers = {"content-type": "application/json"}
        if bearer:
            headers["authorization"] = f"Bearer {bearer}"
        r = urllib.request.Request(f"{ep}/_aws/execute-api/{api}{path}", method=method, headers=headers,
                                   data=json.dumps(body).encode() if body is not None else None)
        try:
            with urllib.request.urlopen(r, timeout=60) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    order = {"amount": 990, "currency": "usd", "customer_id": "cus_jwt", "payment_method": "pm_card_visa"}

    begin("refusals: no token 401, a client outside JwtAudience 401, a token without the scope 403")
    code, _ = call("POST", "/orders/ord-jwt-x/charge", None, order)
    check(code == 401, f"no token: {code}")
    code, _ = call("POST", "/orders/ord-jwt-x/charge", token(outsider), order)
    check(code == 401, f"another audience: {code}")
    code, _ = call("POST", "/orders/ord-jwt-x/charge", token(reader), order)
    check(code == 403, f"without charges:write: {code}")

    begin("the order service's token: 202, charged once, GET succeeded")
    bearer = token(order_service)
    code, body = call("POST", "/orders/ord-jwt-1/charge", bearer, order)
    check(code == 202, f"202: {code} {body}")
    op = body["operation_id"]
    wait_for("ord-jwt-1 succeeded", lambda: (lambda c, b: c == 200 and b["status"] == "succeeded")(
        *call("GET", "/orders/ord-jwt-1/charge", bearer)), 60)
    with urllib.request.urlopen(f"{first['stripe_url']}/_sim/ledger", timeout=10) as resp:
        ledger = json.loads(resp.read())
    check(len([p for p in ledger["payment_intents"] if p.get("operation_id") == op]) == 1, "one PaymentIntent")
    code, _ = call("GET", "/orders/ord-jwt-x/charge", bearer)
    check(code == 404, f"the refused requests wrote nothing: {code}")

    begin("refunds ask for their own scope: a token with charges:write alone 403, with refunds:write 202")
    charging = token(charger)
    code, body = call("POST", "/orders/ord-jwt-2/charge", charging, order)
    check(code == 202, f"the charges-only client's own order: 202 ({code} {body})")
    code, _ = call("POST", "/orders/ord-jwt-2/refunds/rf-jwt-2", charging, {"amount": 100})
    check(code == 403, f"its refund without refunds:write: 403 ({code})")
    code, _ = call("GET", "/orders/ord-jwt-2/refunds/rf-jwt-2", charging)
    check(code == 404, f"the refused refund wrote nothing ({code})")
    code, body = call("POST", "/orders/ord-jwt-1/refunds/rf-jwt-1", bearer, {"amount": 100})
    check(code == 202, f"twin: the order service's token with refunds:write: 202 ({code} {body})")


if __name__ == "__main__":
    scenario.run(main, "jwt-scenario")
