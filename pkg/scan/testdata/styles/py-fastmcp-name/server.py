# Written for effectfence's scanner tests: FastMCP decorators whose name= differs from the
# function's name, read_/action_ prefixes, services defined elsewhere.
from mcp.server.fastmcp import FastMCP


def create_server(reader, actor):
    mcp = FastMCP("courses")

    @mcp.tool(name="read_courses")
    def courses() -> dict:
        return reader.courses()

    @mcp.tool(name="action_enroll")
    def enroll_student(course_id: int) -> dict:
        return actor.enroll(course_id)

    @mcp.tool(name="action_refresh_courses")
    def refresh() -> dict:
        return actor.refresh_courses()

    @mcp.tool(name="read_grades")
    def grades(course_id: int) -> dict:
        return reader.grades(course_id)

    return mcp
