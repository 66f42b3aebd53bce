"""The revisions, oldest first: 0001 is the schema as it was when migrations began."""
