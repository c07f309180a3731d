"""Reaching hosts over SSH (paramiko), as small composed parts; :class:`~parapipe.remote.host.RemoteHost` holds
one of each.

- :mod:`~parapipe.remote.hostspec`: :class:`~parapipe.remote.hostspec.HostSpec`, where and how to reach a host.
- :mod:`~parapipe.remote.connection`: the connection (host-key checked, keepalive, deadlines, one-line errors);
  :mod:`~parapipe.remote.known_hosts` (host-key policies) and :mod:`~parapipe.remote.liveness` (keepalive,
  deadlines on blocking requests, :class:`~parapipe.remote.liveness.ConnectionLost`).
- :mod:`~parapipe.remote.ssh_channels`: commands on exec channels with deadlines.
- :mod:`~parapipe.remote.host_files`, :mod:`~parapipe.remote.remote_fs`: files over SFTP or exec channels.
- :mod:`~parapipe.remote.remote_agent`: the on-device agent started over SSH;
  :mod:`~parapipe.remote.agent_client`: its protocol client (an agent over SSH or a local subprocess).

Deploy bundles (what is sent) live in :mod:`parapipe.deploy`; this package only moves commands and files.
"""
