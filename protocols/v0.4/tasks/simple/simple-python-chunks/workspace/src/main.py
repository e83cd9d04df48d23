# simple-python-chunks: implement the five requirements in src/
