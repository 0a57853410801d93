"""Where the ledger lives, as a Prefect Block. The URL is a secret: a PostgreSQL URL carries
its password, and a secret is shown masked and never logged."""

from __future__ import annotations

from typing import Any, ClassVar

from prefect.blocks.core import Block
from pydantic import Field, SecretStr


class PostledgerLedger(Block):
    """The ledger's database and the month's budget."""

    _block_type_name: ClassVar[str] = "Postledger Ledger"
    _block_type_slug: ClassVar[str] = "postledger-ledger"
    _description: ClassVar[str] = (
        "The ledger postledger keeps: a SQLAlchemy database URL (SQLite or PostgreSQL), an "
        "optional monthly budget, and the shared folder for spill files."
    )

    database_url: SecretStr | None = Field(
        default=None,
        description="e.g. postgresql+psycopg://postledger:PASSWORD@db:5432/postledger; empty: "
        "POSTLEDGER_DATABASE_URL, or SQLite in the flow's working folder.",
    )
    max_cost: int | None = Field(
        default=None,
        ge=0,
        description="Budget per month in micro-units (1 000 000 = 1 unit of currency).",
    )
    spill_path: str | None = Field(
        default=None,
        description="A folder every worker can write and the next run can read (a shared "
        "volume): where a paid batch's task id or output goes when the ledger cannot be "
        "written. Required with a database other than SQLite; empty: POSTLEDGER_SPILL_PATH.",
    )

    def settings_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        if self.database_url is not None:
            fields["database_url"] = self.database_url.get_secret_value()
        if self.max_cost is not None:
            fields["max_cost"] = self.max_cost
        if self.spill_path:
            fields["spill_path"] = self.spill_path
        return fields
