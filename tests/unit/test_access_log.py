"""Finding N6 (docs/reliability.md): secrets out of the server's request log."""

from __future__ import annotations

import logging
import logging.config

import pytest

from troupe.main.access_log import redact, uvicorn_log_config

KEY = "trp_" + "A1b2" * 10


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (f"GET /v1/sessions?api_key={KEY}", "GET /v1/sessions?api_key=[redacted]"),
        ("GET /x?a=1&Token=t0k&b=2", "GET /x?a=1&Token=[redacted]&b=2"),
        ("GET /x?api%5Fkey=v&x-api-key=w", "GET /x?api%5Fkey=[redacted]&x-api-key=[redacted]"),
        ("GET /x?password=p;secret=s#f", "GET /x?password=[redacted];secret=[redacted]#f"),
        (f"GET /x/{KEY}?q={KEY[:6]}%5F", "GET /x/trp_[redacted]?q=trp_[redacted]"),
        (f"GET /x?q=trp%5F{KEY[4:]}", "GET /x?q=trp_[redacted]"),
        ("GET /v1/sessions?limit=10&key=", "GET /v1/sessions?limit=10&key="),
        (
            "GET /v1/sessions/main1/logs?container=main1",
            "GET /v1/sessions/main1/logs?container=main1",
        ),
    ],
)
def test_redact(line: str, expected: str) -> None:
    assert redact(line) == expected


def test_uvicorns_request_lines_are_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    logging.config.dictConfig(uvicorn_log_config())
    try:
        logging.getLogger("uvicorn.access").info(
            '%s - "%s %s HTTP/%s" %d', "127.0.0.1:1", "GET", f"/v1/s?api_key={KEY}", "1.1", 401
        )
        logging.getLogger("uvicorn.error").info(
            '%s - "WebSocket %s" [accepted]', "127.0.0.1:1", f"/v1/s/x/shell?token={KEY}"
        )
    finally:
        for name in ("uvicorn", "uvicorn.access", "uvicorn.error"):
            logger = logging.getLogger(name)
            logger.handlers.clear()
            logger.filters.clear()
    out = capsys.readouterr()
    text = out.out + out.err
    assert "api_key=[redacted]" in text and "token=[redacted]" in text, text
    assert KEY[4:] not in text
