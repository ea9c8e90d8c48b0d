from shared.model.client import (
    ModelClient,
    ModelReply,
    OpenAIModelClient,
    build_openai_client,
    to_openai_messages,
)

__all__ = ["ModelClient", "ModelReply", "OpenAIModelClient", "build_openai_client", "to_openai_messages"]
