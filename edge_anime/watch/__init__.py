"""The watch folder as a state machine: inbox/ -> work/<worker>/ -> done/ | failed/ (+ outbox/ outputs).

core: claims in, verdicts out (retry schedule, pause on the box's own faults); faults: what an error means;
folders: layout and checks; detect: which inbox files are complete; claim: atomic take-over and recovery;
handler: one claimed file -> output name and commit; journal: the processed list for after_success: keep.
"""
