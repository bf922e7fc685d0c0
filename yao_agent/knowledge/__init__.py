"""Knowledge: collections of documents, searched by full text and by meaning, cited by assistants (CONTRACT §9.1)."""
