"""Security: identities and the client handshake, access rules, limits per identity, and the
cluster credential that brokers prove to each other. Sans-IO like every core: nonces come in as
arguments (the runtime draws them from `secrets`), and nothing here opens a file or a socket."""
