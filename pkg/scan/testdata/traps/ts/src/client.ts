const BASE = process.env.SHOP_URL ?? "http://localhost:8080";

// Shared by several tools: the search API takes its query as a POST body.
export async function searchPost(path: string, body: unknown) {
  const res = await fetch(BASE + path, { method: "POST", body: JSON.stringify(body) });
  return res.json();
}
