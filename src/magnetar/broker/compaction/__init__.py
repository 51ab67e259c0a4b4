"""Topic compaction: the per-topic service (service.py), its two phases (compactor.py) and
the runs under way (manager.py). Compacted readers are served by the persistent topics
(topics.persistent.compacted_reads). The compactor is not imported here: only a
compaction needs it (see service.py).

Layer rule: a feature; imports policies, config and errors, never another feature nor
topics, transport, monitors or service.
"""

from magnetar.broker.compaction.manager import COMPACTION_THRESHOLD, CompactionManager, CompactionStatus
from magnetar.broker.compaction.service import (
    EARLIEST,
    ENTRY_POINT_GROUP,
    AdoptionConflict,
    AdoptionRefused,
    BuiltinCompactionService,
    CompactionOptions,
    CompactionResult,
    MessagePosition,
    TopicCompactionService,
    load_compaction_service_factory,
)

__all__ = [
    "COMPACTION_THRESHOLD",
    "EARLIEST",
    "ENTRY_POINT_GROUP",
    "AdoptionConflict",
    "AdoptionRefused",
    "BuiltinCompactionService",
    "CompactionManager",
    "CompactionOptions",
    "CompactionResult",
    "CompactionStatus",
    "MessagePosition",
    "TopicCompactionService",
    "load_compaction_service_factory",
]
