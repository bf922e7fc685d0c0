"""The services the outside calls (the CLI, the server, the Python API): runs, chats, tenancy."""
