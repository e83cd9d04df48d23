# simple-python-whitespace: implement the five requirements in src/
