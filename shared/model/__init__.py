"""The model port. The openai adapter lives in `shared.model.openai_client`, imported only
by the orchestrator (the other functions ship without openai)."""

from toolpipe.shared.model.port import ModelClient, ModelReply, to_openai_messages

__all__ = ["ModelClient", "ModelReply", "to_openai_messages"]
