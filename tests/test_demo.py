"""``loopengine demo`` runs end to end, offline, and every check in it holds."""

from __future__ import annotations

import io
from pathlib import Path

from loopengine.local.demo import run_demo


def test_demo_runs_clean(tmp_path: Path) -> None:
    out = io.StringIO()

    code = run_demo(str(tmp_path / "demo.db"), fresh=True, out=out)

    text = out.getvalue()
    assert code == 0, text
    for line in (
        '"stopReason": "pending_approval"',
        "X-Actauth-Signature signature verified",
        "X-Loopengine-Signature signature verified",
        '"alreadyResolved": true',
        '"stopReason": "denied"',
        "issue_refund: denied",
        "send_email: skipped",
        '"stopReason": "end_turn"',
    ):
        assert line in text, f"{line!r} missing from the transcript"
    assert "FAIL" not in text
    assert "REJECTED" not in text
    assert (tmp_path / "demo.db").exists()
