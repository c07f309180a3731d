"""Reaching hosts over SSH and running mappings on them.

- :mod:`~parapipe.deploy.hostspec`, :mod:`~parapipe.deploy.host`, :mod:`~parapipe.deploy.known_hosts`: SSH
  connections (paramiko) with host-key checking, quoted commands, SFTP files.
- :mod:`~parapipe.deploy.agent_client`, :mod:`~parapipe.deploy.remote_agent`: the on-device agent
  (``device_agents/agent.py``) locally or over SSH.
- :mod:`~parapipe.deploy.bundle`, :mod:`~parapipe.deploy.upload`: what :mod:`parapipe.app.deploy` composes for
  ``parapipe deploy`` (a bundle with a SHA-256 manifest, resumable upload, a run through the agent, results
  fetched, nothing left behind).
"""
