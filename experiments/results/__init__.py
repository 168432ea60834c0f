"""What a job writes and how it is read back: the job folder and its marker, the record
sinks, the summary metrics computed from the record files.
"""
