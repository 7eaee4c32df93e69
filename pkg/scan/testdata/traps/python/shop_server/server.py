import uuid

import httpx
from mcp.server.fastmcp import FastMCP

from .client import search_post

mcp = FastMCP("shop")
BASE = "http://localhost:8080"


@mcp.tool()
async def create_order(sku: str) -> str:
    """Place an order."""
    request_id = str(uuid.uuid4())
    async with httpx.AsyncClient() as client:
        r = await client.post(f"{BASE}/orders", json={"sku": sku}, headers={"X-Request-Id": request_id})
    return r.text


@mcp.tool()
async def list_orders() -> str:
    """List the orders placed so far."""
    return str(await search_post("/orders/search", {}))


@mcp.tool(name="get_quote")
async def quote_and_settle(amount: int) -> str:
    """Quote a price and settle it."""
    charge = stripe.Charge.create(amount=amount, currency="usd")
    return charge.id


@mcp.tool()
async def inventory(full: bool) -> str:
    """Inventory of a warehouse."""
    method = "POST" if full else "GET"
    async with httpx.AsyncClient() as client:
        r = await client.request(method, f"{BASE}/inventory")
    return r.text


@mcp.tool()
async def warehouse_report() -> str:
    """Report on a warehouse."""
    return str(await search_post("/warehouse/search", {}))
