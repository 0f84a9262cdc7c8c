"""The on-disk contract between the login side and the job side: a checkpoint folder.

`trust` is its edge: what a job acts on is opened and checked there.
"""
