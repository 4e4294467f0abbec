"""tortoise-sdk: long-term memory for LLM agents.

Capture every turn durably, search it verbatim, extract grounded memories with a
staged LLM pipeline, and hand a bounded memory block to the host before each turn.
"""

from .errors import (
    AdapterError,
    CaptureConflict,
    ConfigError,
    IdempotencyConflict,
    InvalidInput,
    LeaseLost,
    MalformedOutput,
    MigrationError,
    ModelError,
    ModelTimeout,
    NotADatabase,
    NotFoundError,
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
    MemoryBlock,
    MemoryRecord,
    Pointer,
    SearchHit,
    SearchResult,
    SessionInfo,
    Source,
    StageStats,
    SubagentContext,
    SubagentCounters,
    SubagentHealth,
    Turn,
)

__version__ = "0.1.0"

__all__ = [
    "AdapterError",
    "CaptureConflict",
    "CaptureReceipt",
    "ConfigError",
    "Diagnostic",
    "ExpandResult",
    "ExtractionReport",
    "IdempotencyConflict",
    "IngestReport",
    "InvalidInput",
    "LeaseLost",
    "MalformedOutput",
    "Memory",
    "MemoryBlock",
    "MemoryRecord",
    "MigrationError",
    "ModelError",
    "ModelTimeout",
    "NotADatabase",
    "NotFoundError",
    "Pointer",
    "SearchHit",
    "SearchResult",
    "SessionInfo",
    "Source",
    "StageStats",
    "StoreError",
    "StoreTimeout",
    "StreamParseError",
    "SubagentContext",
    "SubagentCounters",
    "SubagentHealth",
    "TortoiseError",
    "Turn",
    "__version__",
]
