"""Write tokens: how a write that already landed is recognised as ours when it is sent again.

botocore re-sends a request whose response it did not get (a read timeout, a dropped connection, a
500). If the first send was applied, the second one finds its own write in the table, and a
conditional write then fails on it::

    send 1   put v4 if version = 3 ........ applied, response lost
    send 2   put v4 if version = 3 ........ ConditionalCheckFailed, ALL_OLD = v4 (ours)

Every logical write therefore gets one random token, stamped on each item it writes (attribute
``wtok``) and, for a transaction, sent as its ``ClientRequestToken``. DynamoDB answers a repeat of
that transaction within 10 minutes with success and applies nothing; where it does not (past the
window, or a server like moto that ignores the token) the failed condition's ALL_OLD item carries
our token, and that says the write landed. Puts replace the whole item, so a stored token names
the last writer of the item: a token that is not ours means someone else wrote it, a real conflict.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from loopengine.stores.dynamodb_codec import Item, s

WRITE_TOKEN = "wtok"
"""The attribute holding the token of the logical write that last wrote an item."""

_NAME, _VALUE = "#wtok", ":wtok"
_SET = re.compile(r"\bSET\s+", re.IGNORECASE)


def new_token() -> str:
    """A fresh token for one logical write (36 characters: a ClientRequestToken's maximum)."""
    return str(uuid.uuid4())


def stamp(item: Item, token: str) -> Item:
    """``item`` carrying ``token``."""
    return {**item, WRITE_TOKEN: s(token)}


def stamp_action(action: dict[str, Any], token: str) -> dict[str, Any]:
    """A TransactWriteItems action whose written item carries ``token``.

    A Put gets the attribute in its item; an Update sets it in its UpdateExpression. A Delete or a
    ConditionCheck writes no item, so only the ClientRequestToken can vouch for it.
    """
    if "Put" in action:
        put = action["Put"]
        return {"Put": {**put, "Item": stamp(put["Item"], token)}}
    if "Update" in action:
        update = dict(action["Update"])
        expression, assignment = update["UpdateExpression"], f"{_NAME} = {_VALUE}"
        if _SET.search(expression):
            expression = _SET.sub(lambda m: f"{m.group(0)}{assignment}, ", expression, count=1)
        else:
            expression = f"SET {assignment} {expression}"
        names = {**update.get("ExpressionAttributeNames", {}), _NAME: WRITE_TOKEN}
        values = {**update.get("ExpressionAttributeValues", {}), _VALUE: s(token)}
        update |= {
            "UpdateExpression": expression,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        return {"Update": update}
    return action


def carries(old: Item | None, token: str) -> bool:
    """Whether the stored item ``old`` was last written by the write holding ``token``."""
    return old is not None and old.get(WRITE_TOKEN) == s(token)
