"""The example app's MCP server: a deterministic, offline weather forecast over stdio.

Run by yao-agent as declared in mcps/weather.yml; also runnable by hand:
    python mcps/weather_server.py            (stdio)
    python mcps/weather_server.py http 9000  (streamable HTTP at http://127.0.0.1:9000/mcp)
"""

from __future__ import annotations

import hashlib
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("weather")

_SKIES = ["sunny", "partly cloudy", "overcast", "light rain", "showers", "windy", "snow flurries"]


@server.tool()
def forecast(city: str, days: int = 1) -> str:
    """Forecast for a city over the next `days` days (1-7)."""
    city = city.strip()
    if not city:
        raise ToolError("city must not be empty")
    if not 1 <= days <= 7:
        raise ToolError(f"days must be between 1 and 7, got {days}")
    lines = []
    for day in range(days):
        seed = hashlib.sha256(f"{city.lower()}:{day}".encode()).digest()
        temperature = seed[1] % 30 - 2
        skies = _SKIES if temperature <= 2 else _SKIES[:-1]  # no snow on warm days
        sky = skies[seed[0] % len(skies)]
        lines.append(f"{city} day {day + 1}: {sky}, {temperature}°C")
    return "\n".join(lines)


@server.tool()
def cities() -> list[str]:
    """Cities the service knows best."""
    return ["Paris", "Berlin", "Tokyo", "Lima", "Nairobi"]


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
