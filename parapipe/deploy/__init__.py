"""Deploy bundles: what ``parapipe deploy`` sends to a host and how it gets there.

- :mod:`~parapipe.deploy.bundle`: a bundle folder (plan, sub-models, reference model, agent and ppexec/) with a
  SHA-256 manifest.
- :mod:`~parapipe.deploy.upload`: the bundle's files on an SSH host (what is there, resumable upload, stray
  removal, fetch), over :mod:`parapipe.remote` (the SSH transport).
"""
