"""CheckpointStore on DynamoDB: a checkpoint item plus one pointer item per pendingId.

Its items are drawn in :mod:`loopengine.stores.dynamodb_items`; ``list_open`` reads the index's
``OPEN#<tenant>#<n>`` shards (:mod:`loopengine.stores.dynamodb_index`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from loopengine.domain.base.errors import AlreadyExists
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.checkpoint import TurnCheckpoint
from loopengine.domain.turns import TurnRecord
from loopengine.stores.dynamodb_codec import key, s
from loopengine.stores.dynamodb_index import read as read_index
from loopengine.stores.dynamodb_items import DynamoStore
from loopengine.stores.dynamodb_table import TransactionCancelled


class DynamoCheckpointStore(DynamoStore):
    """CheckpointStore on DynamoDB: a checkpoint item plus one pointer item per pendingId."""

    def create(self, cp: TurnCheckpoint) -> None:
        """Write the checkpoint and its pointers in one transaction; AlreadyExists if any is taken."""
        actions = self._create_checkpoint_actions(cp)
        try:
            self.table.transact(actions)
        except TransactionCancelled as exc:
            raise AlreadyExists(f"checkpoint {cp.id} or one of its pendingIds exists") from exc

    def get(self, checkpoint_id: str) -> TurnCheckpoint | None:
        """Read by checkpoint id."""
        return self._read(f"CP#{checkpoint_id}", "CP", TurnCheckpoint.from_dict)

    def find_by_pending(self, pending_id: str) -> TurnCheckpoint | None:
        """Follow a pendingId's pointer (closed checkpoints included): two consistent reads."""
        pointer = self.table.get(f"PENDING#{pending_id}", "PENDING")
        return self.get(pointer["checkpointId"]["S"]) if pointer else None

    def find_with_turn(self, pending_id: str) -> tuple[TurnCheckpoint, TurnRecord | None] | None:
        """The pointer (GetItem), then its checkpoint and turn in one BatchGetItem (consistent)."""
        pointer = self.table.get(f"PENDING#{pending_id}", "PENDING")
        if pointer is None:
            return None
        cp_id, turn_id = pointer["checkpointId"]["S"], pointer["turnId"]["S"]
        found = {
            i["pk"]["S"]: i
            for i in self.table.batch_get([key(f"CP#{cp_id}", "CP"), key(f"TURN#{turn_id}", "TURN")])
        }
        if f"CP#{cp_id}" not in found:
            return None
        cp = TurnCheckpoint.from_dict(self.table.decode(found[f"CP#{cp_id}"]))
        turn = found.get(f"TURN#{turn_id}")
        return cp, None if turn is None else self._turn_of(turn)

    def get_with_config(
        self, checkpoint_id: str, config_hash: str | None
    ) -> tuple[TurnCheckpoint | None, JsonDict | None]:
        """The checkpoint and, if asked, the config snapshot: one BatchGetItem (consistent)."""
        if config_hash is None:
            return self.get(checkpoint_id), None
        wanted = [key(f"CP#{checkpoint_id}", "CP"), key(f"CONFIG#{config_hash}", "CONFIG")]
        found = {i["pk"]["S"]: i for i in self.table.batch_get(wanted)}
        cp, config = found.get(f"CP#{checkpoint_id}"), found.get(f"CONFIG#{config_hash}")
        return (
            None if cp is None else TurnCheckpoint.from_dict(self.table.decode(cp)),
            None if config is None else dict(self.table.decode(config)),
        )

    def replace(self, cp: TurnCheckpoint) -> TurnCheckpoint:
        """Compare-and-set on ``cp.version``; VersionConflict carries the stored record or None."""
        stored = dataclasses.replace(cp, version=cp.version + 1)
        self._compare_and_set(self._checkpoint_item(stored), cp.version, TurnCheckpoint.from_dict)
        return stored

    def list_open(self, tenant: str, agent: str | None = None) -> list[TurnCheckpoint]:
        """Open checkpoints of ``tenant``, oldest first: its own index shards (eventually consistent)."""
        extra: dict[str, Any] = {}
        if agent is not None:
            extra = {"FilterExpression": "#agent = :agent", "names": {"#agent": "agent"}}
            extra["values"] = {":agent": s(agent)}
        listed = read_index(self.table, f"OPEN#{tenant}", **extra)
        found = (TurnCheckpoint.from_dict(self.table.decode(i)) for i in listed)
        return [cp for cp in found if not cp.closed and cp.tenant == tenant and agent in (None, cp.agent)]
