"""Set-up that several test files share: each module owns one kind (failpoints, crafted journal
lines, interrupts, hosts sharing a PostgreSQL journal)."""
