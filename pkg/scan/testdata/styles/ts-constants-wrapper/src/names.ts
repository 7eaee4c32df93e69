// Written for effectfence's scanner tests: tool names kept as constants in their own file.
export const TOOL_NAMES = {
  LOOKUP: "lookup_contact",
  NOTIFY: "notify_contact",
};

export const SCHEDULE_CALL = "schedule_call";
