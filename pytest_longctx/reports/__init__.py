"""What people read: tables, the terminal summary, markdown, HTML, junit properties and
the results JSON."""
