module podsubject

go 1.22
