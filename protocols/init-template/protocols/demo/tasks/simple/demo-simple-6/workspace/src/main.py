# demo-simple-6: implement the five requirements in src/
