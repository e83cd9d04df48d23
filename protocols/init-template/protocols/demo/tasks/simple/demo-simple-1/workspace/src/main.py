# demo-simple-1: implement the five requirements in src/
