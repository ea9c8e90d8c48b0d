"""The REST API function: a Powertools resolver (`handler`) with a router per resource (`runs`,
`approvals`, the approval `page`), domain errors mapped to statuses once (`errors`), the
caller's identity (`identity`), request parsing (`request`), the services the routes call
(`services`) and the OpenAPI document (`openapi`)."""
