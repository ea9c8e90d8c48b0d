"""`make bench`: the pipeline against its peers (pipeline.py) and the functions' cold starts (coldstart.py)."""
