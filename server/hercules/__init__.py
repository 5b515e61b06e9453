"""hercules: SLA-bounded configuration search and fleet provisioning (Hercules, issue 20)."""
