# Written for effectfence's scanner tests: functions returning lists of Tool objects whose
# names put the noun first and the verb last.
from mcp.types import Tool


def get_queue_tools() -> list[Tool]:
    return [
        Tool(
            name="sqs_queue_create",
            description="Create a queue",
            inputSchema={"type": "object", "properties": {"name": {"type": "string"}}},
        ),
        Tool(
            name="sqs_queue_list",
            description="List queues",
            inputSchema={"type": "object", "properties": {}},
        ),
        Tool(
            name="sqs_message_send",
            description="Send a message",
            inputSchema={"type": "object", "properties": {"body": {"type": "string"}}},
        ),
        Tool(
            name="sqs_queue_describe",
            description="Attributes of a queue",
            inputSchema={"type": "object", "properties": {"name": {"type": "string"}}},
        ),
    ]
