"""Non-persistent topics: messages handed to each subscription's dispatcher at once and
then forgotten (no ledger, no cursor).

Layer rule: as topics/ (never transport, monitors or service); imports topics/ but not
persistent/.
"""
