"""Reference documents generated from the code: the REST API's OpenAPI document (`openapi.py`),
the run events' JSON Schemas (`event_schemas.py`) and the docs site's reference pages made from
those and the CLI's parser (`docs.py`); a test fails when any is stale."""
