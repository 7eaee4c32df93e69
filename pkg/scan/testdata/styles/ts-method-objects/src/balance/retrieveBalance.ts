// Written for effectfence's scanner tests: a read tool in the same style, with money words.
import type { Context, Tool } from "../tools";

export const retrieveBalance = async (client: Payments, context: Context) => {
  const balance = await client.balance.retrieve();
  return balance;
};

const tool = (context: Context): Tool => ({
  method: "retrieve_balance",
  name: "Retrieve Balance",
  description: "The account's balance",
  parameters: emptyParameters(context),
  execute: retrieveBalance,
});

export default tool;
