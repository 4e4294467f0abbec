"""tortoise-sdk: long-term memory for LLM agents.

Capture every turn durably, search it verbatim, extract grounded memories with a
staged LLM pipeline, and hand a bounded memory block to the host before each turn.
"""

from typing import TYPE_CHECKING

from .errors import (
    AdapterError,
    CaptureConflict,
    ConfigError,
    DatabaseReplaced,
    ForeignDatabase,
    IdempotencyConflict,
    InvalidInput,
    InvalidType,
    LeaseLost,
    MalformedOutput,
    MigrationError,
    ModelError,
    ModelTimeout,
    NotADatabase,
    NotFoundError,
    ReadOnlyStore,
    SchemaTooNew,
    StoreClosed,
    StoreError,
    StoreTimeout,
    StreamParseError,
    TortoiseError,
)
from .ingest import IngestReport
from .memory import Memory
from .models import (
    CaptureReceipt,
    Diagnostic,
    ExpandResult,
    ExtractionReport,
    EmbedReport,
    ForgetReport,
    JobInfo,
    JobStatus,
    MemoryBlock,
    MemoryRecord,
    NamespaceInfo,
    Pointer,
    SearchHit,
    SearchResult,
    SessionInfo,
    Source,
    StageStats,
    SubagentContext,
    SubagentCounters,
    SubagentHealth,
    Tombstone,
    Turn,
)

if TYPE_CHECKING:  # for type checkers and the API docs; imported on first use below
    from .async_memory import AsyncMemory

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """``AsyncMemory`` is imported on first use: asyncio costs a fresh process (``tortoise hook``) tens of ms."""
    if name == "AsyncMemory":
        from .async_memory import AsyncMemory

        return AsyncMemory
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AdapterError",
    "AsyncMemory",
    "CaptureConflict",
    "CaptureReceipt",
    "ConfigError",
    "DatabaseReplaced",
    "Diagnostic",
    "EmbedReport",
    "ExpandResult",
    "ExtractionReport",
    "ForeignDatabase",
    "ForgetReport",
    "IdempotencyConflict",
    "IngestReport",
    "InvalidInput",
    "InvalidType",
    "JobInfo",
    "JobStatus",
    "LeaseLost",
    "MalformedOutput",
    "Memory",
    "MemoryBlock",
    "MemoryRecord",
    "MigrationError",
    "ModelError",
    "ModelTimeout",
    "NamespaceInfo",
    "NotADatabase",
    "NotFoundError",
    "Pointer",
    "ReadOnlyStore",
    "SchemaTooNew",
    "SearchHit",
    "SearchResult",
    "SessionInfo",
    "Source",
    "StageStats",
    "StoreClosed",
    "StoreError",
    "StoreTimeout",
    "StreamParseError",
    "SubagentContext",
    "SubagentCounters",
    "SubagentHealth",
    "Tombstone",
    "TortoiseError",
    "Turn",
    "__version__",
]
