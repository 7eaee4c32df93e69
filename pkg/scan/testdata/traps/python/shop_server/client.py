import httpx

BASE = "http://localhost:8080"


async def search_post(path: str, body: dict) -> dict:
    """Shared by several tools: the search API takes its query as a POST body."""
    async with httpx.AsyncClient() as client:
        r = await client.post(BASE + path, json=body)
    return r.json()
