"""SessionStore on DynamoDB: one item per message, in order (see :mod:`loopengine.stores.dynamodb_items`)."""

from __future__ import annotations

from loopengine.domain.base.errors import VersionConflict
from loopengine.domain.messages import Message
from loopengine.domain.tokens.context_window import Compaction, History
from loopengine.stores import dynamodb_bill as bill
from loopengine.stores.dynamodb_items import DynamoStore
from loopengine.stores.dynamodb_table import TransactionCancelled


class DynamoSessionStore(DynamoStore):
    """SessionStore on DynamoDB: one item per message, in order (see :mod:`~.dynamodb_items`)."""

    def load(self, session_id: str) -> list[Message]:
        """The whole history in order (a paginated, strongly consistent Query)."""
        history: list[Message] = []
        for item in self.table.query(f"SESSION#{session_id}", "MSG#"):
            if item["sk"]["S"] != bill.LATEST:  # (the latest compaction sorts after the messages)
                history.extend(Message.from_dict(m) for m in self.table.decode(item))
        return history

    def load_since_compaction(self, session_id: str) -> History:
        """The history from its latest compaction on (see :mod:`~loopengine.stores.dynamodb_bill`)."""
        return bill.read_since_compaction(self.table, session_id)

    def compactions(self, session_id: str) -> list[Compaction]:
        """Every compaction of the session, oldest first (its ``CMP#`` markers)."""
        return bill.read_markers(self.table, session_id)

    def _length(self, session_id: str) -> int:
        """The history's length: where its last item starts plus what it holds (one Query page of 1)."""
        last = next(
            iter(
                self.table.query(f"SESSION#{session_id}", below=bill.LATEST, ScanIndexForward=False, Limit=1)
            ),
            None,
        )
        if last is None or not last["sk"]["S"].startswith("MSG#"):
            return 0
        return int(last["sk"]["S"].removeprefix("MSG#")) + len(self.table.decode(last))

    def append(self, session_id: str, messages: list[Message], expected_len: int) -> None:
        """Append iff the history has ``expected_len`` messages; VersionConflict(current=length).

        The history's length is read first (its last item: an append ahead of it is refused), then
        one transaction whose new message items must be absent (``MSG#<expected_len>`` existing means
        the history moved meanwhile), so two appenders can never both land. Appends inside a
        transition (:meth:`DynamoTurnStore.commit`) skip the read: their ``expected_len`` always comes
        from reading the history, so they can only be behind it, which the absent items catch.
        """
        current = self._length(session_id)
        if current != expected_len:  # (behind or ahead: ahead is only refused here)
            raise VersionConflict(
                f"session {session_id} has {current} messages, not {expected_len}", current=current
            )
        actions = self._append_actions(session_id, messages, expected_len)
        try:
            self.table.transact(actions)
        except TransactionCancelled:
            current = len(self.load(session_id))
            raise VersionConflict(
                f"session {session_id} has {current} messages, not {expected_len}", current=current
            ) from None
