//! The order service as the simulated requests' caller: every request the simulation sends to
//! the checkout function (a checkout, a refund, a capture or a cancel) is this signed request
//! on its path.

use aws_lambda_events::apigw::{
    ApiGatewayRequestAuthorizer, ApiGatewayRequestAuthorizerIamDescription, ApiGatewayV2httpRequest,
};
use aws_lambda_events::http::header::{HeaderValue, CONTENT_TYPE};
use aws_lambda_events::http::Method;

/// The order service as the simulated checkouts' authenticated caller.
const SIMULATED_CALLER: &str = "arn:aws:sts::000000000000:assumed-role/order-service/simulate";

/// `POST raw_path` about order `order_id` with this JSON `body`, as API Gateway's IAM authorizer
/// delivers a signed request from the order service.
pub fn request(order_id: &str, raw_path: String, body: String) -> ApiGatewayV2httpRequest {
    let mut req = ApiGatewayV2httpRequest::default();
    req.request_context.http.method = Method::POST;
    req.raw_path = Some(raw_path);
    req.path_parameters
        .insert("order_id".into(), order_id.to_owned());
    req.headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let mut iam = ApiGatewayRequestAuthorizerIamDescription::default();
    iam.user_arn = Some(SIMULATED_CALLER.into());
    let mut authorizer = ApiGatewayRequestAuthorizer::default();
    authorizer.iam = Some(iam);
    req.request_context.authorizer = Some(authorizer);
    req.body = Some(body);
    req
}
