// Written for effectfence's scanner tests: a tool registered as a task, storing the task.
export const registerReportTool = (server) => {
    server.experimental.tasks.registerToolTask("build-report", { description: "Build a report as a task" }, {
        createTask: async (args, extra) => {
            const task = await extra.taskStore.createTask({ ttl: 60000 });
            return { task };
        },
    });
};
