"""Reference documents generated from the code: the REST API's OpenAPI document (`openapi.py`)
and the run events' JSON Schemas (`event_schemas.py`); a test fails when either is stale."""
