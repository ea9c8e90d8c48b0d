"""The approval page behind the signed link: its routes, its flow (`ApprovalPage`: which page,
with which status), its answer form, and its HTML (Jinja2 templates in `templates/`,
autoescaped). The decisions themselves are `shared/deferred`'s and `shared/runs/deferred.py`'s."""
