"""What people read: the generated docs tables (``render``), the records' state for the CLI
(``status``) and the attention families' evidence (``attention_evidence``)."""
