"""Question / gold-SQL templates for the databases of made-up organizations: ``chinook`` (a music
store), ``school``, ``shop`` and ``library`` (held out of training).
"""

from __future__ import annotations

from aloft.data.sources.sql.templates.base import PairTemplate

__all__ = ["CHINOOK", "LIBRARY", "SCHOOL", "SHOP"]

T = PairTemplate

CHINOOK = [
    T(
        "chinook.tracks_of_artist",
        "How many tracks by the artist '{artist}' are in the store?",
        "SELECT COUNT(*) FROM Track t JOIN Album al ON al.AlbumId = t.AlbumId JOIN Artist ar "
        "ON ar.ArtistId = al.ArtistId WHERE ar.Name = {artist}",
        "SELECT Name AS artist FROM Artist WHERE ArtistId IN (SELECT ArtistId FROM Album)",
    ),
    T(
        "chinook.albums_of_artist",
        "What are the titles of the albums by {artist}?",
        "SELECT al.Title FROM Album al JOIN Artist ar ON ar.ArtistId = al.ArtistId WHERE ar.Name = {artist}",
        "SELECT Name AS artist FROM Artist WHERE ArtistId IN (SELECT ArtistId FROM Album)",
    ),
    T(
        "chinook.customers_in_country",
        "Which customers live in {country}? Give their first and last names.",
        "SELECT FirstName, LastName FROM Customer WHERE Country = {country}",
        "SELECT DISTINCT Country AS country FROM Customer",
    ),
    T(
        "chinook.sales_in_country",
        "What is the total of all invoices billed to {country}?",
        "SELECT SUM(Total) FROM Invoice WHERE BillingCountry = {country}",
        "SELECT DISTINCT BillingCountry AS country FROM Invoice",
    ),
    T(
        "chinook.genre_track_count",
        "How many tracks of the genre '{genre}' are there?",
        "SELECT COUNT(*) FROM Track t JOIN Genre g ON g.GenreId = t.GenreId WHERE g.Name = {genre}",
        "SELECT Name AS genre FROM Genre",
    ),
    T(
        "chinook.playlist_size",
        "How many tracks does the playlist '{playlist}' contain?",
        "SELECT COUNT(*) FROM PlaylistTrack pt JOIN Playlist p ON p.PlaylistId = pt.PlaylistId "
        "WHERE p.Name = {playlist}",
        "SELECT Name AS playlist FROM Playlist WHERE PlaylistId IN (SELECT PlaylistId FROM PlaylistTrack) "
        "GROUP BY Name HAVING COUNT(*) = 1",
    ),
    T(
        "chinook.longer_than_album_avg",
        "Which tracks of the album '{album}' are longer than the album's "
        "average track? Give the track names.",
        "SELECT t.Name FROM Track t JOIN Album al ON al.AlbumId = t.AlbumId WHERE al.Title = {album} "
        "AND t.Milliseconds > (SELECT AVG(Milliseconds) FROM Track WHERE AlbumId = al.AlbumId)",
        "SELECT al.Title AS album FROM Album al JOIN Track t ON t.AlbumId = al.AlbumId GROUP BY al.AlbumId "
        "HAVING COUNT(*) >= 8",
    ),
    T(
        "chinook.support_rep_customers",
        "How many customers does the support representative {first} {last} look after?",
        "SELECT COUNT(*) FROM Customer c JOIN Employee e ON e.EmployeeId = c.SupportRepId "
        "WHERE e.FirstName = {first} AND e.LastName = {last}",
        "SELECT FirstName AS first, LastName AS last FROM Employee WHERE EmployeeId IN "
        "(SELECT SupportRepId FROM Customer)",
        3,
    ),
]

SCHOOL = [
    T(
        "school.students_in_city",
        "How many students live in {city}?",
        "SELECT COUNT(*) FROM students WHERE city = {city}",
        "SELECT DISTINCT city FROM students",
        6,
    ),
    T(
        "school.courses_of_dept",
        "Which courses does the {dept} department offer? Give the titles and credits.",
        "SELECT c.title, c.credits FROM courses c JOIN departments d ON d.dept_id = c.dept_id WHERE d.name = {dept}",
        "SELECT name AS dept FROM departments WHERE dept_id IN (SELECT dept_id FROM courses)",
    ),
    T(
        "school.avg_score_course",
        "What was the average score in {course} in the term {term}?",
        "SELECT AVG(e.score) FROM enrollments e JOIN courses c ON c.course_id = e.course_id "
        "WHERE c.title = {course} AND e.term = {term}",
        "SELECT DISTINCT c.title AS course, e.term FROM enrollments e JOIN courses c ON c.course_id = e.course_id "
        "WHERE e.score IS NOT NULL",
        10,
    ),
    T(
        "school.students_of_teacher",
        "How many different students have taken a course taught by {first} {last}?",
        "SELECT COUNT(DISTINCT e.student_id) FROM enrollments e JOIN courses c ON c.course_id = e.course_id "
        "JOIN teachers t ON t.teacher_id = c.teacher_id WHERE t.first_name = {first} AND t.last_name = {last}",
        "SELECT first_name AS first, last_name AS last FROM teachers WHERE teacher_id IN "
        "(SELECT teacher_id FROM courses)",
    ),
    T(
        "school.grade_count",
        "How many students are in grade {grade}?",
        "SELECT COUNT(*) FROM students WHERE grade_level = {grade}",
        "SELECT DISTINCT grade_level AS grade FROM students",
        4,
    ),
    T(
        "school.above_course_avg",
        "Which students scored above the course average in {course} in "
        "'2024-spring'? Give their first and last names.",
        "SELECT s.first_name, s.last_name FROM enrollments e JOIN students s ON s.student_id = e.student_id "
        "JOIN courses c ON c.course_id = e.course_id WHERE c.title = {course} AND e.term = '2024-spring' "
        "AND e.score > (SELECT AVG(score) FROM enrollments WHERE course_id = c.course_id AND term = '2024-spring')",
        "SELECT DISTINCT c.title AS course FROM courses c JOIN enrollments e ON e.course_id = c.course_id "
        "WHERE e.term = '2024-spring'",
    ),
]

SHOP = [
    T(
        "shop.products_in_category",
        "Which products are in the category '{category}'? Give their names and prices.",
        "SELECT p.name, p.price FROM products p JOIN categories c ON c.category_id = p.category_id "
        "WHERE c.name = {category}",
        "SELECT name AS category FROM categories",
    ),
    T(
        "shop.orders_of_customer",
        "How many orders has {customer} placed?",
        "SELECT COUNT(*) FROM orders o JOIN customers c ON c.customer_id = o.customer_id WHERE c.name = {customer}",
        "SELECT name AS customer FROM customers WHERE customer_id IN (SELECT customer_id FROM orders)",
    ),
    T(
        "shop.customers_country",
        "How many customers come from {country}?",
        "SELECT COUNT(*) FROM customers WHERE country = {country}",
        "SELECT DISTINCT country FROM customers",
    ),
    T(
        "shop.status_count",
        "How many orders have the status '{status}'?",
        "SELECT COUNT(*) FROM orders WHERE status = {status}",
        "SELECT DISTINCT status FROM orders",
        4,
    ),
    T(
        "shop.avg_rating_product",
        "What is the average rating of the product '{product}'?",
        "SELECT AVG(r.rating) FROM reviews r JOIN products p ON p.product_id = r.product_id WHERE p.name = {product}",
        "SELECT name AS product FROM products WHERE product_id IN (SELECT product_id FROM reviews)",
    ),
    T(
        "shop.revenue_category",
        "What is the revenue (quantity times unit price) of the category '{category}' "
        "over orders that were not cancelled?",
        "SELECT SUM(oi.quantity * oi.unit_price) FROM order_items oi JOIN orders o ON o.order_id = oi.order_id "
        "JOIN products p ON p.product_id = oi.product_id JOIN categories c ON c.category_id = p.category_id "
        "WHERE c.name = {category} AND o.status <> 'cancelled'",
        "SELECT name AS category FROM categories",
    ),
]

LIBRARY = [
    T(
        "library.books_of_genre",
        "Which books are in the genre '{genre}'? Give their titles and publication years.",
        "SELECT title, published_year FROM books WHERE genre = {genre}",
        "SELECT DISTINCT genre FROM books",
    ),
    T(
        "library.books_by_author",
        "What are the titles of the books written by {author}?",
        "SELECT b.title FROM books b JOIN authors a ON a.author_id = b.author_id WHERE a.name = {author}",
        "SELECT name AS author FROM authors WHERE author_id IN (SELECT author_id FROM books)",
    ),
    T(
        "library.copies_at_branch",
        "How many copies does the {branch} branch hold?",
        "SELECT COUNT(*) FROM copies c JOIN branches b ON b.branch_id = c.branch_id WHERE b.name = {branch}",
        "SELECT name AS branch FROM branches",
        5,
    ),
    T(
        "library.loans_of_member",
        "How many loans has the member with ID {member} made?",
        "SELECT COUNT(*) FROM loans WHERE member_id = {member}",
        "SELECT DISTINCT member_id AS member FROM loans",
    ),
    T(
        "library.members_of_type",
        "How many members have a '{membership}' membership?",
        "SELECT COUNT(*) FROM members WHERE membership = {membership}",
        "SELECT DISTINCT membership FROM members",
        3,
    ),
    T(
        "library.unreturned_at_branch",
        "How many loans of copies held by the {branch} branch have not been returned?",
        "SELECT COUNT(*) FROM loans l JOIN copies c ON c.copy_id = l.copy_id JOIN branches b "
        "ON b.branch_id = c.branch_id WHERE b.name = {branch} AND l.returned_date IS NULL",
        "SELECT name AS branch FROM branches",
        5,
    ),
    T(
        "library.times_borrowed",
        "How many times was the book '{title}' borrowed?",
        "SELECT COUNT(*) FROM loans l JOIN copies c ON c.copy_id = l.copy_id JOIN books b "
        "ON b.book_id = c.book_id WHERE b.title = {title}",
        "SELECT title FROM books",
    ),
    T(
        "library.late_returns",
        "How many loans made in {year} were returned after their due date?",
        "SELECT COUNT(*) FROM loans WHERE substr(loan_date, 1, 4) = {year} AND returned_date > due_date",
        "SELECT DISTINCT substr(loan_date, 1, 4) AS year FROM loans",
        6,
    ),
    T(
        "library.longer_than_genre_avg",
        "Which books of the genre '{genre}' have more pages than the average "
        "book of that genre? Give their titles.",
        "SELECT title FROM books b WHERE genre = {genre} AND pages > (SELECT AVG(pages) FROM books "
        "WHERE genre = b.genre)",
        "SELECT DISTINCT genre FROM books",
    ),
    T(
        "library.branches_with_book",
        "Which branches hold a copy of '{title}'? Give the branch names in alphabetical order.",
        "SELECT DISTINCT br.name FROM branches br JOIN copies c ON c.branch_id = br.branch_id JOIN books b "
        "ON b.book_id = c.book_id WHERE b.title = {title} ORDER BY br.name",
        "SELECT title FROM books",
    ),
    T(
        "library.popular_genres",
        "Which genres were borrowed more than {k} times in all? Give the genre and the number of loans.",
        "SELECT b.genre, COUNT(*) FROM loans l JOIN copies c ON c.copy_id = l.copy_id JOIN books b "
        "ON b.book_id = c.book_id GROUP BY b.genre HAVING COUNT(*) > {k}",
        "SELECT value AS k FROM (SELECT 50 AS value UNION SELECT 80 UNION SELECT 100 UNION SELECT 120)",
        4,
    ),
    T(
        "library.author_country",
        "How many authors in the catalogue come from {country}?",
        "SELECT COUNT(*) FROM authors WHERE country = {country}",
        "SELECT DISTINCT country FROM authors",
    ),
]
