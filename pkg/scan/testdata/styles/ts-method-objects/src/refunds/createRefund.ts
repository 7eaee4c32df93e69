// Written for effectfence's scanner tests: one file per tool, a factory returning an object
// whose `method` is the tool's id and `name` its title, the execute function defined above it.
import type { Context, Tool } from "../tools";

export const createRefund = async (client: Payments, context: Context, params: RefundParams) => {
  const refund = await client.refunds.create(params);
  return { id: refund.id, status: refund.status };
};

const tool = (context: Context): Tool => ({
  method: "create_refund",
  name: "Create Refund",
  description: "Refund a payment",
  parameters: refundParameters(context),
  execute: createRefund,
});

export default tool;
